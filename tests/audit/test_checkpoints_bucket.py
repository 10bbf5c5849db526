"""Signed checkpoints published to an S3-compatible bucket too (A4), against a real S3 HTTP API
on this machine (moto's server): the same objects as the directory, never a checkpoint
replaced, a bucket that fails said in words, a cut tail seen from the bucket alone."""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from django.test import Client
from django.urls import reverse
from moto.server import ThreadedMotoServer

from aimon_admin.audit import checkpoints, publication, signing
from aimon_admin.audit.models import AuditCheckpoint, format_timestamp
from tests.audit.helpers import execute, record_events
from tests.ports import free_port

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "aimon_verify_audit", ROOT / "clients" / "verifier" / "aimon_verify_audit.py"
)
verifier = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(verifier)  # type: ignore[union-attr]
_buckets = itertools.count(1)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, its endpoint."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Credentials through boto3's own chain, as in production; nothing from this machine's
    ~/.aws or environment."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-access-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key-never-shown")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


@pytest.fixture
def s3(s3_server: str) -> Any:
    return boto3.client("s3", endpoint_url=s3_server)


@pytest.fixture
def key(settings: Any, tmp_path: Path, s3_server: str, s3: Any) -> Iterator[Any]:
    """A signing key, the directory, and a fresh bucket of this test's own, under a prefix."""
    created = signing.create_key(tmp_path / "key.pem")
    name = f"aimon-checkpoints-{os.getpid()}-{next(_buckets)}"
    s3.create_bucket(Bucket=name)
    settings.AIMON_AUDIT_SIGNING_KEY = str(tmp_path / "key.pem")
    settings.AIMON_AUDIT_CHECKPOINT_DIR = str(tmp_path / "published")
    settings.AIMON_AUDIT_CHECKPOINT_S3_URL = f"s3://{name}/audit/prod"
    settings.AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT = s3_server
    checkpoints.refusal_forget()
    yield created
    checkpoints.refusal_forget()


def objects(s3: Any) -> dict[str, bytes]:
    """The bucket's objects under the prefix, by name."""
    target = publication.bucket()
    assert target is not None
    listed = s3.list_objects_v2(Bucket=target.name, Prefix=target.prefix).get("Contents", [])
    return {
        item["Key"].removeprefix(target.prefix): s3.get_object(Bucket=target.name, Key=item["Key"])[
            "Body"
        ].read()
        for item in listed
    }


def test_each_checkpoint_goes_to_the_directory_and_the_bucket_alike(
    key: Any, s3: Any, tmp_path: Path
) -> None:  # A4
    record_events(3)
    first = checkpoints.checkpoint_sign()
    record_events(2)
    second = checkpoints.checkpoint_sign()

    directory = tmp_path / "published"
    files = {path.name: path.read_bytes() for path in directory.iterdir()}
    in_bucket = objects(s3)
    assert in_bucket == files  # the same names, the same bytes
    assert len([name for name in in_bucket if name.startswith("checkpoint-")]) == 2
    assert in_bucket["latest.json"] == publication.document_text(second.document).encode()  # replaced
    assert (
        in_bucket[publication.file_name(first.document)] == publication.document_text(first.document).encode()
    )
    target = publication.bucket()
    assert target is not None
    for name in in_bucket:
        head = s3.head_object(Bucket=target.name, Key=target.prefix + name)
        assert head["ContentType"] == (publication.PEM_TYPE if name.endswith(".pem") else "application/json")

    assert second.publish_problem == ""
    assert second.published_to.splitlines() == [
        str(directory / publication.file_name(second.document)),
        f"{target.url}/{publication.file_name(second.document)}",
    ]
    assert checkpoints.signing_status().problems == []


def test_a_checkpoint_object_there_already_is_never_replaced(key: Any, s3: Any) -> None:  # A4
    record_events(2)
    now = dt.datetime.now(dt.UTC)
    name = publication.file_name({"time": format_timestamp(now), "tree_size": 2})
    target = publication.bucket()
    assert target is not None
    s3.put_object(Bucket=target.name, Key=target.prefix + name, Body=b"planted first\n")

    checkpoint = checkpoints.checkpoint_sign(now=now)
    assert publication.file_name(checkpoint.document) == name
    assert s3.get_object(Bucket=target.name, Key=target.prefix + name)["Body"].read() == b"planted first\n"
    assert checkpoint.publish_problem == checkpoints.NOT_PUBLISHED.format(
        where=target.url, problem=f"{target.url}/{name} is there already, other bytes: not replaced"
    )
    assert checkpoint.published_to.splitlines() == [
        str(publication.directory() / name)
    ]  # the directory has it
    assert checkpoint.publish_problem in checkpoints.signing_status().problems

    # The same checkpoint again (a retry) finds its own bytes there: nothing to say.
    record_events(1)
    again = checkpoints.checkpoint_sign()
    assert publication.publish(again.document, signing.public_pem(key.public_key()))[1] == {}


@pytest.mark.parametrize("how", ["server-stopped", "wrong-endpoint"])
def test_a_bucket_that_cannot_be_reached_keeps_the_checkpoint_and_says_so(
    key: Any, settings: Any, auditor: Any, how: str
) -> None:  # A4
    record_events(2)
    if how == "server-stopped":
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        settings.AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=f"http://{host}:{port}").create_bucket(Bucket="aimon-stopped")
        settings.AIMON_AUDIT_CHECKPOINT_S3_URL = "s3://aimon-stopped"
        server.stop()
    else:
        settings.AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT = f"http://127.0.0.1:{free_port()}"  # nothing listens
    target = publication.bucket()
    assert target is not None

    checkpoint = checkpoints.checkpoint_sign()  # signed and kept, the directory has it
    assert AuditCheckpoint.objects.filter(pk=checkpoint.pk).exists()
    assert checkpoint.published_to == str(
        publication.directory() / publication.file_name(checkpoint.document)
    )
    assert checkpoint.publish_problem.startswith(f"Signed, but could not be written to {target.url}: ")
    assert "Could not connect" in checkpoint.publish_problem
    assert "test-secret-key" not in checkpoint.publish_problem
    assert "test-access-key" not in checkpoint.publish_problem
    assert checkpoints.signing_status().problems == [checkpoint.publish_problem]

    client = Client()
    client.force_login(auditor)
    for page in ("core:home", "audit:home"):
        html = client.get(reverse(page)).content.decode()
        assert 'data-testid="checkpoint-card"' in html
        assert f"Signed, but could not be written to {target.url}: " in html

    # The chain verification cannot ask the bucket: a problem, never a quiet pass.
    problem = checkpoints.signed_tail_problem(checkpoint.tree_size)
    assert problem is not None
    assert f"{target.url}/latest.json cannot be read" in problem.problem


def test_what_the_bucket_missed_is_copied_with_the_next_and_its_series_verifies(
    key: Any, settings: Any, s3: Any, s3_server: str, tmp_path: Path
) -> None:  # A4
    record_events(2)
    checkpoints.checkpoint_sign()
    settings.AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT = f"http://127.0.0.1:{free_port()}"  # an outage
    record_events(2)
    missed = checkpoints.checkpoint_sign()
    assert missed.publish_problem
    settings.AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT = s3_server
    record_events(2)
    last = checkpoints.checkpoint_sign()
    assert last.publish_problem == ""

    directory = tmp_path / "published"
    assert objects(s3) == {path.name: path.read_bytes() for path in directory.iterdir()}
    copy = tmp_path / "auditor-copy"
    copy.mkdir()
    for name, content in objects(s3).items():
        (copy / name).write_bytes(content)
    keys = {verifier.key_id(key.public_key()): key.public_key()}
    assert verifier.verify_checkpoints(copy, keys).startswith("3 checkpoints, each signed and extending")


def test_a_cut_tail_is_seen_from_the_bucket_alone(
    key: Any, triggers_dropped: None, tmp_path: Path
) -> None:  # A4
    record_events(12)
    signed = checkpoints.checkpoint_sign()
    execute("DELETE FROM audit_auditevent WHERE seq >= %s", [10])
    execute("DELETE FROM audit_audittreenode WHERE position * (1 << level) + (1 << level) > %s", [9])
    execute("DELETE FROM audit_auditcheckpoint")
    for path in (tmp_path / "published").iterdir():  # the directory emptied too
        path.unlink()

    problem = checkpoints.signed_tail_problem(9)
    assert problem is not None
    assert problem.problem == checkpoints.SIGNED_TAIL_CUT.format(
        which=publication.BUCKET_WHICH, time=signed.document["time"], size=12, head=9, first=10
    )
    with pytest.raises(
        checkpoints.CheckpointRefusedError, match=r"fewer than the 12 the bucket's newest published"
    ):
        checkpoints.checkpoint_sign()


def test_a_bucket_latest_that_is_not_a_checkpoint_is_a_problem(key: Any, s3: Any) -> None:  # A4
    record_events(2)
    checkpoints.checkpoint_sign()
    target = publication.bucket()
    assert target is not None
    s3.put_object(Bucket=target.name, Key=target.prefix + "latest.json", Body=b"{edited by hand")
    problem = checkpoints.signed_tail_problem(2)
    assert problem is not None
    assert problem.problem.startswith(f"{target.url}/latest.json is not a checkpoint")
    with pytest.raises(checkpoints.CheckpointRefusedError, match=r"latest\.json is not a checkpoint"):
        checkpoints.checkpoint_sign()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("AIMON_AUDIT_CHECKPOINT_S3_URL", "https://bucket.example.org/prefix"),
        ("AIMON_AUDIT_CHECKPOINT_S3_URL", "s3://KEY:SECRET@bucket/prefix"),
        ("AIMON_AUDIT_CHECKPOINT_S3_URL", "s3://"),
        ("AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT", "minio.example.org:9000"),
        ("AIMON_AUDIT_CHECKPOINT_S3_ENDPOINT", "https://KEY:SECRET@minio.example.org"),
    ],
)
def test_a_bad_bucket_setting_stops_the_start_naming_it(variable: str, value: str) -> None:  # A4
    env = {
        name: text for name, text in os.environ.items() if not name.startswith("AIMON_AUDIT_CHECKPOINT_S3")
    }
    env.update({"DJANGO_SETTINGS_MODULE": "aimon_admin.settings.test", variable: value})
    if variable.endswith("ENDPOINT"):
        env["AIMON_AUDIT_CHECKPOINT_S3_URL"] = "s3://aimon-checkpoints"
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"django.core.exceptions.ImproperlyConfigured: {variable} must be")
    assert "SECRET" not in result.stderr
