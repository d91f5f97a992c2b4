"""Typed credentials: each adapter declares a pydantic model of what its connection needs.

The model's JSON schema is the connect form (every field carries a label and a kind: text,
secret, file, toggle or select) and its validation is the API's: unknown fields are refused,
and errors name the field, never its value. Secret fields are `SecretStr`, so a model printed
or logged by accident shows `**********`.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

FieldKind = Literal["text", "secret", "file", "toggle", "select"]


def field(label: str, kind: FieldKind = "text", *, default: Any = ..., help: str | None = None,
          max_length: int | None = 10_000, **kwargs: Any) -> Any:
    """A credential field with its connect-form label and kind (in the JSON schema as x-label/x-kind)."""
    extra: dict[str, Any] = {"x-label": label, "x-kind": kind}
    if help:
        extra["x-help"] = help
    if kind in ("toggle", "select"):
        max_length = None
    return Field(default, json_schema_extra=extra, max_length=max_length, **kwargs)


class Credentials(BaseModel):
    """Base of every adapter's credentials model."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    def reveal(self) -> dict[str, Any]:
        """The plain values, for encryption at rest and for the adapter's own use. Never log it."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            out[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return out

    @classmethod
    def form(cls) -> list[dict[str, Any]]:
        """The connect form: one entry per field (name, label, kind, required, default, help)."""
        schema = cls.model_json_schema()
        required = set(schema.get("required", []))
        rows = []
        for name, prop in schema.get("properties", {}).items():
            rows.append({"name": name, "label": prop.get("x-label", name), "kind": prop.get("x-kind", "text"),
                         "required": name in required, "default": prop.get("default"),
                         "help": prop.get("x-help")})
        return rows

    @classmethod
    def secret_fields(cls) -> set[str]:
        """Fields whose value is a secret (SecretStr, also a pasted or uploaded key file): never shown
        back, never pre-filled."""
        return {name for name, info in cls.model_fields.items() if _holds_secret(info.annotation)}


def _holds_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    return any(_holds_secret(arg) for arg in get_args(annotation))


class ApiKeyCredentials(Credentials):
    """One API key: what most REST clouds take."""

    api_key: SecretStr = field("API Key", "secret", min_length=1)


def describe_error(exc: ValidationError) -> str:
    """'api_key: Field required; region: Extra inputs are not permitted' — field names only,
    since a value may be a secret."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "credentials"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)
