"""The Compute console: the studio's Compute page served by gpuprov (pages.py) on its public API, and
the browser sessions it signs in with (session.py). The pages are static files (static/): everything
they show comes from the JSON API, the same calls any client makes."""
