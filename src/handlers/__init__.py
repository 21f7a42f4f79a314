"""Lambda entry points named by template.yaml (``handlers.api.handler`` ...): thin shims.

The handlers themselves live in the library (:mod:`loopengine.http`); this folder exists only in
the SAM ``CodeUri`` (``src/``) and is not installed with the package.
"""
