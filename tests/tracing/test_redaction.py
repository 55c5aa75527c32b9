"""Redaction on its engines (tracing._redaction): Kingfisher's rule examples caught, ordinary text
left alone, the shapes found leaking caught in the store, only what is found replaced, and the
ways someone would try to slip a secret past it. (detect-secrets' own cases:
test_detect_secrets_corpus.py.)"""

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from rollscope import tracing
from rollscope.tracing._redaction import REDACTED, Redactor
from rollscope.tracing._redaction.engine import RULES
from tests.tracing.test_payload import _all_stored_text

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def redactor():
    return Redactor(include_environment=False)


def test_kingfishers_rule_examples_are_caught(redactor, capsys):
    examples = [
        e for e in json.loads((FIXTURES / "kingfisher" / "examples.json").read_text())["examples"] if e["visible"]
    ]  # (a rule that only supplies a part to another reports nothing alone)
    missed = [e for e in examples if redactor.text(e["text"]) == e["text"]]
    with capsys.disabled():
        print(f"\nKingfisher's rule examples caught: {len(examples) - len(missed)} of {len(examples)}")
    assert len(missed) <= 0.05 * len(examples), missed[:20]


def test_ordinary_text_is_left_alone(redactor, capsys):
    lines = json.loads((FIXTURES / "ordinary_text" / "lines.json").read_text())["lines"]
    altered = [(x["kind"], x["line"]) for x in lines if redactor.text(x["line"]) != x["line"]]
    with capsys.disabled():
        print(f"\nordinary lines altered: {len(altered)} of {len(lines)} {altered}")
    assert len(lines) >= 1000 and len(altered) <= 0.005 * len(lines)


def test_each_of_rollscopes_own_rules_finds_its_examples(redactor):
    for path in RULES:
        for rule in yaml.safe_load(path.read_text())["rules"]:
            for example in rule.get("examples") or []:
                assert REDACTED in redactor.text(example), (rule["id"], example)


# The shapes found leaking past the last redactor (secret, the text around it); the secret must not
# reach the store, whatever else of the line does.
LEAKED = [
    ("MTA4NjYzNzY4NjQ5MDY1Mjg3NA", 'discordToken = "{}"'),
    ("aio_Zx9K2mQ7rT4vW8yB3nP6sD1f", 'ADAFRUIT_TOKEN ::= "{}"'),
    ("patJ4kL9mN2pQ5rS8.a1b2c3d4e5", "<airtableToken>{}</airtableToken>"),
    ("0f9e8d7c6b5a49382716", 'System.setProperty("BITTREX_TOKEN", "{}");'),
    ("fb7Kq2Lm9Np4Rs6Tv8", '$freshbooksToken .= "{}";'),
    ("ntn_12345678901" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA2cD4fG" + "h6J", "the notion key {} in a log line"),
    ("sgp_" + "0123456789abcdef" * 4, "export SRC={}"),
    ("hvb." + hashlib.sha512(b"vault").hexdigest() + hashlib.sha256(b"batch").hexdigest()[:20], "vault said {}"),
    ("dop_v1_" + "a1b2c3d4" * 8, "DIGITALOCEAN {}"),
    ("fo1_" + "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1u", "fly {}"),
    ("s3cr3tPass", "curl -u admin:{} https://api.example.com/v1"),
    ("Hunter2Hunter2", '<add key="Password" value="{}"/>'),
    ("c3VwZXJzZWNyZXRwYXNzd29yZDEyMw==", "apiVersion: v1\nkind: Secret\ndata:\n  password: {}\n"),
    ("npm_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "then publish with {} from the CI"),
]


def test_the_shapes_found_leaking_never_reach_the_store(trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir))
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        for i, (secret, shape) in enumerate(LEAKED):
            with tracing.trace_span(f"tool{i}", inputs={"code": shape.format(secret)}) as span:
                span.outputs = {"stdout": f"ran: {shape.format(secret)}"}
    assert tracing.flush_tracing(60)
    stored = _all_stored_text(trace_dir)
    assert [s for s, _ in LEAKED if s in stored] == []
    assert "System.setProperty" in stored and "<airtableToken>" in stored  # the rest of each line kept


# Ordinary code that names secrets without holding one: unchanged.
CODE = [
    "secret := maskSecret(f.Secret, percent)",
    "self.password = password",
    "token = self.token",
    "max_tokens = 256",
    "tokenizer = AutoTokenizer.from_pretrained(model_dir)",
    'if not api_key: raise ValueError("set OPENAI_API_KEY")',
    "prompt_token_ids = [151644, 8948, 198]",
    "passwd = getpass.getpass(prompt)",
    "commit 8f3c2a1b9d4e5f60718293a4b5c6d7e8f9012345",
    'secret_key = os.environ["HF_TOKEN"]',  # a lookup
    "self.secret = secret  # the caller's",  # a name, and a comment after it
    '"NuGetApiKey": 916,',  # a number of a few digits: an id
]


@pytest.mark.parametrize("line", CODE)
def test_code_that_only_names_a_secret_is_unchanged(redactor, line):
    assert redactor.text(line) == line


def test_an_env_files_value_is_a_literal_and_its_comment_stays(redactor):
    """``KEY=value`` in an environment file: the value is the secret even when it reads like a name,
    and only it is replaced, the comment after it kept."""
    assert (
        redactor.text("REACT_APP_AUTH_PASSWORD=whiteduke    # some comment")
        == f"REACT_APP_AUTH_PASSWORD={REDACTED}    # some comment"
    )
    assert redactor.text("password = hunter2abc # set by ops") == f"password = {REDACTED} # set by ops"


def test_only_the_secret_is_replaced_not_its_payload(redactor):
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    text = "Step 1: clone the repo.\n" * 50 + f"GITHUB_TOKEN={secret}\n" + "Step 3: run the tests.\n" * 50
    out = redactor.text(text)
    assert secret not in out and out == text.replace(secret, REDACTED)


def test_offsets_hold_after_multibyte_text(redactor):
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    text = f"résumé 東京 🚀 token: {secret} — fin"
    assert redactor.text(text) == text.replace(secret, REDACTED)


# Someone shaping text to slip a secret past: an engine's ignore markers, encodings, splitting.
SECRET = "ghp_" + "Zq8Wn3Rt6Yu1Io4Pa7Sd0Fg2Hj5Kl9Xc3Vb6"
HOSTILE = [
    f"token = {SECRET}  # kingfisher:ignore",
    f"token = {SECRET}  # gitleaks:allow",
    f"token = {SECRET}  # pragma: allowlist secret",
    f"x {base64.b64encode(f'gh token {SECRET} ok'.encode()).decode()}",
    f'{{"nested": "{{\\"token\\": \\"{SECRET}\\"}}"}}',
    f"<p>{SECRET}</p>",
]


@pytest.mark.parametrize(
    "text",
    HOSTILE,
    ids=["kingfisher ignore", "gitleaks allow", "detect-secrets allowlist", "base64", "escaped JSON", "HTML"],
)
def test_markers_and_encodings_do_not_hide_a_secret(redactor, text):
    out = redactor.text(text)
    assert REDACTED in out and SECRET not in out


def test_a_secret_in_a_dict_key_or_a_tool_error_is_redacted(trace_dir, read_store):
    class Tool:
        @tracing.rollout_trace_op(kind="tool")
        async def execute(self, instance_id, parameters):
            raise RuntimeError(f"auth failed for {SECRET}")

    tracing.init_tracing(trace_dir=str(trace_dir))

    async def main():
        with tracing.rollout_trace_attr(step=0, sample_index=0), pytest.raises(RuntimeError):
            await Tool().execute("i1", {SECRET: 1})

    asyncio.run(main())
    read_store()
    assert SECRET not in _all_stored_text(trace_dir)


def test_a_key_seen_before_a_secret_was_added_is_redacted_after_it():
    """The shaper remembers each key's redacted text; a secret of the traced process's environment
    that arrives later (``add_literals``) is redacted in keys seen before it too."""
    from rollscope.tracing._payload import PayloadShaper

    shaper = PayloadShaper(Redactor(include_environment=False))
    key = "tenant-7f3a9c2e4b-api"
    assert shaper.shape({key: 1}) == {key: 1}
    shaper.redactor.add_literals(["7f3a9c2e4b"])
    assert shaper.shape({key: 1}) == {f"tenant-{REDACTED}-api": 1}


def _png(side: int, seed: int) -> bytes:
    """A real PNG of random pixels (what an image tool returns), built with zlib alone."""
    import random
    import struct
    import zlib

    rnd = random.Random(seed)
    rows = b"".join(b"\x00" + bytes(rnd.randrange(256) for _ in range(side * 3)) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def test_data_that_only_looks_random_is_kept_as_written(redactor):
    """Images as data URLs (in markdown, in OpenAI-shaped image parts, in tool JSON), base64 with
    its padding, and values of keys that name data are data, not keys; a key after its name is
    still redacted beside them."""
    texts = []
    for seed in range(50):
        for side in (1, 2, 4, 8):
            url = "data:image/png;base64," + base64.b64encode(_png(side, seed)).decode()
            texts += [
                url,
                f"![plot]({url})",
                json.dumps({"image": url}),
                json.dumps({"content": [{"type": "image_url", "image_url": {"url": url}}]}),
            ]
        blob = base64.b64encode(hashlib.sha256(str(seed).encode()).digest() * (1 + seed % 3)).decode()
        texts += [json.dumps({"data": blob}), json.dumps({"b64_json": blob.rstrip("=")}), f"payload: {blob}"]
    altered = [t for t in texts if redactor.text(t) != t]
    assert altered == []
    key = "sk-proj-" + "Qm7RzT2xVb9LpW4nKc8YdF3hJs6AgE1uNo5Xi0Ze"
    assert redactor.text(json.dumps({"image": "data:image/png;base64,iVBORw0K", "api_key": key})) == json.dumps(
        {"image": "data:image/png;base64,iVBORw0K", "api_key": REDACTED}
    )


def test_a_long_value_full_of_secrets_is_stored_cut_and_redacted(trace_dir, read_store):
    """A tool's 256 KB answer of ``password=`` pairs on one line (its redaction took 76 s whole,
    and lost its trajectory): cut to what is kept and a margin before it is redacted, stored
    redacted, its trajectory with it."""
    import random
    import string

    rnd = random.Random(0)
    values = ["".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(8)) for _ in range(14_000)]
    text = " ".join(f"password={v}" for v in values)
    tracing.init_tracing(trace_dir=str(trace_dir))
    with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("tool", kind="tool") as span:
        span.outputs = {"text": text}
    [t] = read_store().trajectories()
    [stored] = t.spans
    kept = stored.outputs["text"]
    assert kept.startswith("password=[REDACTED]") and len(kept) <= 20_100
    assert "more characters, too dense with secrets to scan]…[truncated " in kept
    assert not any(v in kept for v in values)


def _pairs(n, seed=0):
    import random
    import string

    rnd = random.Random(seed)
    values = ["".join(rnd.choice(string.ascii_letters + string.digits) for _ in range(8)) for _ in range(n)]
    return values, " ".join(f"password={v}" for v in values)


def test_a_value_dense_with_secrets_is_masked_past_the_piece_that_shows_it():
    """A dump of credentials (a ``password=`` pair every 18 characters) costs the engine ~20 µs a
    finding: it is scanned until a piece shows it that dense, redacted there, and the rest masked
    with a mark saying exactly how much; its token spans cover the rest too."""
    redactor = Redactor(include_environment=False)
    values, text = _pairs(4_000)
    out = redactor.text(text)
    assert not any(v in out for v in values)
    kept, mark = out.rsplit("[REDACTED: ", 1)
    masked = int(mark.split(" ")[0].replace(",", ""))
    assert mark == f"{masked:,} more characters, too dense with secrets to scan]"
    assert 0 < len(text) - masked <= 512 and redactor.masked_values == 1 and redactor.masked_chars == masked
    assert kept.startswith("password=[REDACTED]")
    assert redactor.spans(text)[-1] == (len(text) - masked, len(text))
    prose = "The quick brown fox jumps over the lazy dog. " * 400  # 18 KB of prose, then the dump
    out = redactor.text(prose + text)
    assert out.startswith(prose) and out.endswith("too dense with secrets to scan]")
    assert not any(v in out for v in values) and redactor.masked_values == 2


def test_long_code_about_secrets_is_scanned_whole(monkeypatch):
    """Code that names passwords and tokens on every few lines (the standard library's urllib,
    ~100 KB: the densest file of the stdlib and vendor code tried) is no dump of secrets: scanned to
    its end, nothing masked, redacted as a scan with no bound redacts it."""
    import urllib.request

    from rollscope.tracing import _redaction

    code = Path(urllib.request.__file__).read_text()
    redactor = Redactor(include_environment=False)
    out = redactor.text(code)
    assert redactor.masked_values == 0 and "too dense" not in out
    monkeypatch.setattr(_redaction, "_DENSE", float("inf"))
    assert out == Redactor(include_environment=False).text(code)


def test_a_key_of_letters_alone_after_its_name_is_a_key_and_a_name_in_code_is_code(redactor):
    import random
    import string

    rnd = random.Random(1)
    keys = ["".join(rnd.choice(string.ascii_letters) for _ in range(20)) for _ in range(1000)]
    leaked = [k for k in keys if k in redactor.text(f"api_key={k}")]
    assert len(leaked) <= 40  # (was 11 %: 115 of 1,000 taken for names in code)
    for line in (
        "api_key=self.apiKeyFromEnvironment",
        "password=getPasswordFromVault",
        "password=userProvidedPassword",
        "secret_key=cfg.secretKey",
    ):
        assert redactor.text(line) == line
