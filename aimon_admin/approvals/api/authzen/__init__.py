"""The tool decision in the OpenID AuthZEN Authorization API 1.0 shape (docs/api.md
"AuthZEN: the tool decision for gateways"): `views` serves it, `serializers` holds its request
and answer shapes."""
