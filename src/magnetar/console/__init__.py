"""The web console: a page at `/` of the admin API's ports that shows the broker (overview,
tenants, namespaces, topics, their stats and messages) as a browser client of the admin API.

The page is static files (static/: HTML, CSS and JavaScript modules, no build step, nothing
from a CDN), so the role table of docs/security.md holds in it as everywhere: every figure
it shows comes from an `/admin/v2`, `/admin/v3` or `/metrics` request the browser makes,
with the token signed in for that tab. Nothing here is imported before the first request
for the page (admin.server loads files.py then).

Layering: it sees magnetar.web only (import-linter's `console-client` contract), never the
broker: what it knows of the broker, it asks over HTTP.
"""
