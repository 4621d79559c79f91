"""S3 and anything S3-compatible (MinIO, R2, GCS's XML API) as a source, through boto3.

Credentials come from boto3's standard chain (environment, profile, instance or pod role);
none is ever in a header, and none is ever put in a message: botocore's errors name the
operation and the service's code, and what they could echo of the endpoint is refused with
credentials in it (header.py). Pages are read one at a time (ListObjectsV2), each counted
against max_objects and the listing's deadline as it arrives.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from monitor.sources.binding import ObjectRow
from monitor.sources.header import SourceSpec
from monitor.sources.listing import Bounds, Listing, ListingError, checked_key, scrubbed
from monitor.text import shorten


def _client(spec: SourceSpec, read_timeout: float) -> Any:
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
    bucket, prefix = spec.bucket_and_prefix
    listing = Listing()
    try:
        client = _client(spec, bounds.remaining())
        token: str | None = None
        while True:
            bounds.remaining()
            arguments: dict[str, Any] = {
                "Bucket": bucket,
                "Prefix": prefix,
                "MaxKeys": spec.page_size,
            }
            if token:
                arguments["ContinuationToken"] = token
            page = client.list_objects_v2(**arguments)
            listing.pages += 1
            for item in page.get("Contents", []):
                size = item.get("Size")
                row = ObjectRow(
                    checked_key(bounds.name, str(item["Key"])),
                    None if size is None else int(size),  # not said is not zero
                    _aware(item.get("LastModified")),
                    str(item["ETag"]).strip('"') if item.get("ETag") else None,
                )
                bounds.admit(listing, row)
                listing.rows.append(row)
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
