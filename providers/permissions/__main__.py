"""`python -m providers.permissions > docs/permissions.md`"""

from providers.permissions import markdown

print(markdown(), end="")
