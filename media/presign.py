"""SigV4 presigned PUT URLs without botocore's per-call machinery.

botocore's generate_presigned_url builds a whole request for each URL
(parameter validation, serialisation, endpoint rules, event hooks) and
derives the signing key again every time: about 1.5 ms of CPU per URL, the
largest single part of what a 2,000-file direct upload costs the web host
(make bench-upload). A URL is a handful of strings and two HMACs: this
module makes the same URL, byte for byte (tests/storage/test_presign.py checks
it against botocore's own for both kinds of PUT), keeping the signing key of
the day and the client's endpoint, region and credentials. What is signed
is unchanged: the method, the key, the part, the exact Content-Length, and a
single PUT's If-None-Match.

Only for what it knows how to make: a SigV4 client with path-style
addressing and credentials (Fairlane's own settings, project/settings/);
`for_client` answers None otherwise, and the caller uses botocore.
"""
from __future__ import annotations

import hashlib
import hmac
from datetime import datetime, timezone
from urllib.parse import quote, urlsplit

_SAFE = "-_.~"  # SigV4's unreserved characters: what is never percent-encoded


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _enc(value: str, safe: str = _SAFE) -> str:
    return quote(value, safe=safe)


class Presigner:
    """Presigned S3 PUTs for one client's endpoint, region and credentials."""

    def __init__(self, *, endpoint_url: str, region: str, credentials) -> None:
        parts = urlsplit(endpoint_url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        default_port = {"http": 80, "https": 443}.get(parts.scheme)
        # botocore signs the Host header without a default port.
        self._host = parts.hostname if parts.port in (None, default_port) else f"{parts.hostname}:{parts.port}"
        self._path = parts.path.rstrip("/")
        self._region = region
        self._credentials = credentials  # botocore's: may refresh (roles); read each time
        self._keys: dict[tuple[str, str], bytes] = {}  # (secret, day) -> signing key

    @classmethod
    def for_client(cls, client) -> Presigner | None:
        """The presigner for a boto3 S3 client, or None when its URLs are not
        of the kind this module makes (not SigV4, not path-style, no
        credentials)."""
        config = client.meta.config
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if (credentials is None or config.signature_version != "s3v4"
                or (config.s3 or {}).get("addressing_style") != "path"):
            return None
        return cls(endpoint_url=client.meta.endpoint_url, region=client.meta.region_name, credentials=credentials)

    def _signing_key(self, secret: str, day: str) -> bytes:
        key = self._keys.get((secret, day))
        if key is None:
            key = f"AWS4{secret}".encode()
            for part in (day, self._region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            if len(self._keys) > 4:
                self._keys.clear()
            self._keys[(secret, day)] = key
        return key

    def put_url(self, bucket: str, key: str, *, expires_s: int, content_length: int,
                query: tuple[tuple[str, str], ...] = (), if_none_match: str | None = None,
                now: datetime | None = None) -> str:
        """A URL that PUTs exactly `content_length` bytes to `key` (with
        `query`: an UploadPart's uploadId and partNumber, in that order), until
        `expires_s` from `now`; signed with If-None-Match when given."""
        creds = self._credentials.get_frozen_credentials()
        now = (now or _now()).replace(tzinfo=None)
        stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"content-length": str(content_length), "host": self._host}
        if if_none_match is not None:
            headers["if-none-match"] = " ".join(if_none_match.split())
        signed_headers = ";".join(sorted(headers))
        path = f"{self._path}/{_enc(bucket, '/~')}/{_enc(key, '/~')}"
        params = [(_enc(k), _enc(v)) for k, v in query]
        params += [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
                   ("X-Amz-Credential", _enc(f"{creds.access_key}/{day}/{self._region}/s3/aws4_request")),
                   ("X-Amz-Date", stamp), ("X-Amz-Expires", str(expires_s)),
                   ("X-Amz-SignedHeaders", _enc(signed_headers))]
        if creds.token is not None:
            params.append(("X-Amz-Security-Token", _enc(creds.token)))
        query_string = "&".join(f"{k}={v}" for k, v in params)
        canonical = "\n".join([
            "PUT", path, "&".join(f"{k}={v}" for k, v in sorted(params)),
            "".join(f"{name}:{headers[name]}\n" for name in sorted(headers)), signed_headers, "UNSIGNED-PAYLOAD"])
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, f"{day}/{self._region}/s3/aws4_request",
                             hashlib.sha256(canonical.encode()).hexdigest()])
        signature = hmac.new(self._signing_key(creds.secret_key, day), to_sign.encode(), hashlib.sha256).hexdigest()
        return f"{self._origin}{path}?{query_string}&X-Amz-Signature={signature}"
