"""AWS sessions for the commands that talk to AWS (preflight, capacity-blocks).

Normal credential resolution (environment, `--profile`, SSO, instance role), in the config's
region, with short timeouts: on a machine without credentials the instance metadata lookup gives
up after one second instead of hanging, and a missing credential is one line and exit 2.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    CredentialRetrievalError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ProfileNotFound,
    TokenRetrievalError,
)

from fminfra.core.errors import ValidationError

CLIENT_CONFIG = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 4, "mode": "standard"})


class AwsAccessError(ValidationError):
    """No usable credentials or no connection: not a failed check, so the CLI exits 2."""


def make_session(*, region: str, profile: str | None = None) -> boto3.Session:
    """A boto3 session with normal credential resolution; AwsAccessError when it has none."""
    try:
        core = botocore.session.Session(profile=profile)
        # At most one short attempt at the instance metadata service (the default on a laptop
        # without credentials would otherwise add retries and waits to every run).
        core.set_config_variable("metadata_service_timeout", 1)
        core.set_config_variable("metadata_service_num_attempts", 1)
        session = boto3.Session(botocore_session=core, region_name=region)
        credentials = session.get_credentials()
    except ProfileNotFound:
        raise AwsAccessError(f"--profile {profile}: no such profile in the AWS config files") from None
    except TokenRetrievalError as exc:
        raise AwsAccessError(f"AWS credentials: {exc} (run `aws sso login`)") from None
    except CredentialRetrievalError as exc:  # e.g. a container credentials endpoint that does not answer
        raise credentials_unavailable(exc) from None
    if credentials is None:
        raise AwsAccessError(
            "no AWS credentials found (environment variables, --profile, SSO or an instance role); "
            "this command needs read access to the account in the config"
        )
    return session


def credentials_unavailable(exc: Exception) -> AwsAccessError:
    return AwsAccessError(f"AWS credentials could not be retrieved: {exc}")


def client(session: boto3.Session, service: str) -> Any:
    return session.client(service, config=CLIENT_CONFIG)  # type: ignore[call-overload]


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def access_problem(exc: Exception) -> AwsAccessError | None:
    """The AwsAccessError for exceptions that mean "cannot talk to AWS at all", else None."""
    if isinstance(exc, CredentialRetrievalError):
        return credentials_unavailable(exc)
    if isinstance(exc, NoCredentialsError):
        return AwsAccessError("no AWS credentials found (environment variables, --profile, SSO or an instance role)")
    if isinstance(exc, EndpointConnectionError):
        return AwsAccessError(f"cannot reach AWS: {exc}")
    if isinstance(exc, NoRegionError):
        return AwsAccessError("no AWS region (give --region)")
    if isinstance(exc, ClientError) and error_code(exc) in (
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "AuthFailure",
        "SignatureDoesNotMatch",
    ):
        return AwsAccessError(f"AWS rejected the credentials ({error_code(exc)}): refresh them or pick another --profile")
    return None
