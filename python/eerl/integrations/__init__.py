"""eerl's framework integrations (docs/integrations/). IntegrationError: what every integration
raises when the installed framework lacks what it hooks (naming the framework and its version)."""

from ._common import IntegrationError  # noqa: F401
