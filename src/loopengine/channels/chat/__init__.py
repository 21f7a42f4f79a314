"""The conversation in the browser: ``GET /chat/{agent}``, its thread, its cards, and the client module.

:mod:`~loopengine.channels.chat.routes` declares the routes (loaded with the api);
:mod:`~loopengine.channels.chat.pages` answers them (loaded by the first chat request);
:mod:`~loopengine.channels.chat.thread` turns a session's history and audit into the entries the page
shows; :mod:`~loopengine.channels.chat.render` holds the Jinja2 templates, the headers and the static
files: the page's script (``static/chat.js``) and the dependency-free client module it uses
(``static/loopengine-client.js``), which any frontend may import. Like the inbox it sends nothing: it
is a place people come to, and decides through the JSON routes as the signed-in principal.
"""
