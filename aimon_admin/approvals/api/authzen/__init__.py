"""The tool decision in the OpenID AuthZEN Authorization API 1.0 shape (API.md "AuthZEN"):
`views` serves it, `serializers` holds its request and answer shapes."""
