"""The approvals inbox's page side: cards from items, the HTML (Jinja2 templates), its form tokens.

The routes are :mod:`loopengine.channels.inbox.routes`; this package holds what they show and check:
:mod:`~loopengine.channels.inbox.cards` (one card per open item), :mod:`~loopengine.channels.inbox.render`
(the templates, their headers and static files) and :mod:`~loopengine.channels.inbox.csrf` (the
per-principal, per-item form token and the origin check). It sends nothing: the inbox is a place
people come to, not a notifier channel.
"""
