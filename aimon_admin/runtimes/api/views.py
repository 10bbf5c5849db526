"""The runtime's own view of itself: who its token names and its settings."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from aimon_admin.core.choices import SideEffectLevel


@extend_schema(
    summary="The runtime this token names",
    responses={
        200: inline_serializer(
            "RuntimeSelf",
            {
                "name": serializers.CharField(),
                "ceiling": serializers.ChoiceField(SideEffectLevel.choices),
                "exempt_at_or_below": serializers.ChoiceField(SideEffectLevel.choices),
                "token_prefix": serializers.CharField(),
            },
        ),
        401: OpenApiResponse(description="Missing, malformed, unknown or revoked token."),
    },
)
@api_view(["GET"])
def runtime_self(request: Request) -> Response:
    runtime = request.user.runtime
    return Response(
        {
            "name": runtime.name,
            "ceiling": runtime.ceiling,
            "exempt_at_or_below": runtime.exempt_at_or_below,
            "token_prefix": request.auth.prefix,
        }
    )
