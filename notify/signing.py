"""Standard Webhooks signing (https://www.standardwebhooks.com/), with the
reference library so that what we send is what every receiver's verifier
accepts: `webhook-signature: v1,base64(HMAC-SHA256(key, f"{id}.{ts}.{body}"))`
where key is the base64-decoded part of the `whsec_...` secret."""
from __future__ import annotations

import base64
import secrets
from datetime import datetime, timezone

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # 256-bit key, as HMAC-SHA256's block allows without rehashing


def secret_generate() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signed_headers(*, secret: str, msg_id: str, body: str, at: datetime | None = None) -> dict[str, str]:
    """The three Standard Webhooks headers for `body` (the exact bytes sent)."""
    at = at or datetime.now(timezone.utc)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
    }
