"""Redaction that replaces a secret's own characters, whole, and nothing around it: measured on
Semgrep's credential rules' test lines (tests/fixtures/semgrep_secrets, labelled by the rules'
authors, the held-out half of the rules), and the shapes found altering code or keeping parts of
secrets, each written out; data told from keys by what it is, not by the key it is under."""

from __future__ import annotations

import pytest

from rollscope.tracing._redaction import REDACTED, Redactor
from tests.fixtures.semgrep_secrets.corpus import altered, cases, leaked


@pytest.fixture(scope="module")
def redactor():
    return Redactor(include_environment=False)


def test_the_secrets_semgreps_rules_mark_rarely_reach_a_trace_and_their_code_is_kept(redactor, capsys):
    secrets = [c for c in cases("secret", "held_out") if c["kind"] in ("named", "shaped")]
    code = cases("code", "held_out")
    leaks = [c["text"] for c in secrets if leaked(c, redactor.text(c["text"]))]
    changed = [(c["text"], redactor.text(c["text"])) for c in code if altered(c["text"], redactor.text(c["text"]))]
    with capsys.disabled():
        print(
            f"\nSemgrep held-out: secrets leaked {len(leaks)} of {len(secrets)} ({len(leaks) / len(secrets):.1%}); "
            f"code altered {len(changed)} of {len(code)}"
        )
    assert len(secrets) >= 100 and len(leaks) <= 0.03 * len(secrets), leaks
    assert len(code) >= 500 and len(changed) <= 0.005 * len(code), changed


@pytest.mark.parametrize(
    "line",
    [
        "def ok(password=None):",
        "app.get('/ok-protected', jwt({ secret: process.env.SECRET }), function(req, res) {",
        "const opts = Object.assign({issuer: 'http://issuer'}, {secret: configSecret})",
        "\tif !ok || expectedPassword != creds.Password {",
        "new FacebookStrategy({clientSecret:config})",
        'return foreignKeyJsonObject.get("header").toString()',
        "var key = _step2.value.key;",
        'f"https://user123:{_github_pat(github_secret_name)}@github.com/"',
        "\t\t`-----BEGIN RSA PRIVATE KEY-----",
        "\t\t`-----BEGIN PRIVATE KEY BLOCK-----",
    ],
)
def test_a_value_that_is_code_is_kept_and_nothing_after_it_is_cut(redactor, line):
    """A name, a lookup, a call, a placeholder, a key's label: code that reads a secret from
    elsewhere, never the secret; a value ends where code writes what follows it."""
    assert redactor.text(line) == line


@pytest.mark.parametrize(
    ("line", "secret", "kept"),
    [
        (
            "https://hooks.slack.com/workflows/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",
            "F6Vm03reCkhPmwBtaqbN6OW9",
            "",
        ),
        (
            'private const string UserCreationPasswordSecretKey = @"Tq8!vR2mZx";',
            "Tq8!vR2mZx",
            "UserCreationPasswordSecretKey",
        ),
        (
            "Rails4::Application.config.secret_key_base = '3d90f727dcc14992232b9461fac5d31cf2bc184854e0afd90ae67e0'",
            "3d90f727dcc14992232b9461fac5d31cf2bc184854e0afd90ae67e0",
            "Rails4::Application.config.secret_key_base = '",
        ),
        ('password = "hunter2-Secret!"  # the shared one', "hunter2-Secret!", "# the shared one"),
    ],
    ids=["a webhook's whole token", "a name holding the secret's word", "secret_key_base", "a comment after"],
)
def test_a_secret_is_replaced_whole_and_what_is_around_it_kept(redactor, line, secret, kept):
    out = redactor.text(line)
    assert REDACTED in out and not any(secret[i : i + 6] in out for i in range(len(secret) - 5))
    assert kept in out


@pytest.mark.parametrize(
    "text",
    [
        '{"role": "user", "content": "k3v9X2m7Q8w4T6y1Z5b0N3c8Rt5Vz1"}',
        "body: k3v9X2m7Q8w4T6y1Z5b0N3c8Rt5Vz1",
    ],
)
def test_a_key_under_a_data_name_is_still_a_key(redactor, text):
    """Whether a token is data is decided on the token (base64 of a blob, a data URL), never on the
    name of the key it is written under: a chat message's ``content`` holds keys too."""
    assert "k3v9X2m7Q8w4T6y1Z5b0N3c8Rt5Vz1" not in redactor.text(text)
