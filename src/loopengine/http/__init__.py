"""The HTTP side: the Powertools app behind API Gateway (and ``loopengine dev``), and the Lambda entries.

``api`` (every route of DESIGN.md), ``resume`` and ``schedule`` are the three Lambda handlers; the
SAM template names them through the thin shims in the top-level ``handlers`` folder of ``src/``
(``handlers.api.handler`` ...), which is not part of the installed package.
"""
