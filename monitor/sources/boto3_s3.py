"""S3 and anything S3-compatible (MinIO, R2, GCS's XML API) as a source, through boto3.

Credentials come from boto3's standard chain (environment, profile, instance or pod role);
none is ever in a header, and none is ever put in a message: botocore's errors name the
operation and the service's code, and what they could echo of the endpoint is refused with
credentials in it (header.py). Pages are read one at a time (ListObjectsV2), each counted
against max_objects and the listing's deadline as it arrives.

boto3 and botocore (tens of megabytes) are the `s3` extra, `pip install
'invariant-monitor[s3]'`, imported here only when a bucket is listed: without them an S3
source is its invariant's error saying so (MISSING_EXTRA), and nothing else changes.
"""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from typing import Any

from monitor.sources.header import SourceSpec
from monitor.sources.listing import Bounds, Listing, ListingError, checked_key, scrubbed
from monitor.text import shorten

EXTRA = "pip install 'invariant-monitor[s3]'"
MISSING_EXTRA = (
    "source {name}: listing {where} needs the s3 extra (boto3), which is not installed: "
)
_SDK = ("boto3", "botocore")


def missing_extra(name: str, spec: SourceSpec) -> str:
    """What an S3 source says where boto3 is not installed: where, and the fix."""
    return MISSING_EXTRA.format(name=name, where=spec.where) + EXTRA


def _client(spec: SourceSpec, read_timeout: float) -> Any:
    import boto3  # list_s3 found it importable
    from botocore.config import Config

    config = Config(
        connect_timeout=min(10.0, read_timeout),
        read_timeout=read_timeout,
        retries={"max_attempts": 2, "mode": "standard"},
        user_agent_extra="invmon",
    )
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=spec.endpoint, region_name=spec.region, config=config)


def _aware(moment: datetime | None) -> datetime | None:
    """S3 says UTC; botocore leaves a time naive when a compatible store omits the zone,
    and a naive time would be read as the host's local time (or fail to compare)."""
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment


def list_s3(spec: SourceSpec, bounds: Bounds) -> Listing:
    try:
        # Where the SDK first loads (a few hundred milliseconds: only when a source needs it).
        import boto3.session  # noqa: F401  (what _client uses)
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        # Only the SDK's own absence is the missing extra; a module it fails to import
        # (a broken install) is said as itself, by the caller's catch-all.
        if exc.name is None or exc.name.split(".")[0] in _SDK:
            raise ListingError(missing_extra(bounds.name, spec)) from None
        raise
    bucket, prefix = spec.bucket_and_prefix
    listing: Listing = bounds.listing()
    try:
        client = _client(spec, bounds.remaining())
        token: str | None = None
        while True:
            bounds.remaining()
            arguments: dict[str, Any] = {
                "Bucket": bucket,
                "Prefix": prefix,
                "MaxKeys": spec.page_size,
                # Asked for by us, so botocore leaves the keys as S3 sent them (it decodes
                # the ones it asked for itself, replacing bytes that are not UTF-8): a key
                # that is not UTF-8 is then the run's error, never a key silently changed.
                "EncodingType": "url",
            }
            if token:
                arguments["ContinuationToken"] = token
            page = client.list_objects_v2(**arguments)
            listing.pages += 1
            encoded = page.get("EncodingType") == "url"
            # Each object is packed as it is read (binding.Objects); the page, botocore's
            # dicts, is dropped before the next is asked for.
            for item in page.pop("Contents", ()):
                size = item.get("Size")
                key = str(item["Key"])
                if encoded:  # a store that ignores EncodingType sends keys as they are
                    key = urllib.parse.unquote(key, errors="surrogateescape")
                bounds.admit(
                    listing,
                    checked_key(bounds.name, key),
                    None if size is None else int(size),  # not said is not zero
                    _aware(item.get("LastModified")),
                    str(item["ETag"]).strip('"') if item.get("ETag") else None,
                )
            if not page.get("IsTruncated"):
                return listing
            token = page.get("NextContinuationToken")
            if not token:
                raise ListingError(
                    f"source {bounds.name}: {spec.where} said more pages follow but gave no "
                    "continuation token"
                )
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, text = error.get("Code", "?"), error.get("Message", "")
        raise ListingError(
            scrubbed(
                f"source {bounds.name}: listing {spec.where} failed: {code}: {shorten(text, 200)}"
            )
        ) from None
    except BotoCoreError as exc:
        raise ListingError(
            scrubbed(f"source {bounds.name}: listing {spec.where} failed: {shorten(str(exc), 300)}")
        ) from None
