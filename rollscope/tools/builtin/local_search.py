"""Search over a local corpus with BM25: retrieval-augmented agents without any network.

The bundled corpus (``data/search_corpus.jsonl``, short encyclopedic passages written for
rollscope) is the default; ``config.corpus_path`` points at any JSONL with ``title`` and ``text``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool

DEFAULT_CORPUS = Path(__file__).with_name("data") / "search_corpus.jsonl"
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an and are as at be by for from has in is it its of on or that the to was were which with".split())

SCHEMA = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search a local encyclopedia and return the most relevant passages.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "keywords to search for"},
                "top_k": {"type": "integer", "description": "how many passages to return (1-5, default 3)"},
            },
            "required": ["query"],
        },
    },
}


def tokenize(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class BM25Index:
    def __init__(self, docs: list[dict[str, str]], k1: float = 1.5, b: float = 0.75) -> None:
        self.docs = docs
        self.k1, self.b = k1, b
        self.terms = [Counter(tokenize(f"{d['title']} {d['text']}")) for d in docs]
        self.lengths = [sum(t.values()) for t in self.terms]
        self.avg_len = sum(self.lengths) / max(len(docs), 1)
        df = Counter(term for t in self.terms for term in t)
        n = len(docs)
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def search(self, query: str, top_k: int = 3) -> list[tuple[float, dict[str, str]]]:
        q = tokenize(query)
        scored = []
        for doc, terms, length in zip(self.docs, self.terms, self.lengths, strict=True):
            s = 0.0
            for term in q:
                tf = terms.get(term)
                if tf:
                    norm = self.k1 * (1 - self.b + self.b * length / self.avg_len)
                    s += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
            if s > 0:
                scored.append((s, doc))
        scored.sort(key=lambda x: -x[0])
        return scored[:top_k]


def load_corpus(path: str | Path) -> list[dict[str, str]]:
    docs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: not valid JSON: {exc.msg}") from None
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                raise ValueError(f"{path}:{n}: each line needs a 'text' string (and a 'title')")
            docs.append({"id": str(doc.get("id", n)), "title": str(doc.get("title", "")), "text": doc["text"]})
    return docs


class LocalSearchTool(TracedTool):
    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SCHEMA))
        self.index = BM25Index(load_corpus(self.config.get("corpus_path") or DEFAULT_CORPUS))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        query = parameters.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("'query' must be a non-empty string")
        top_k = max(1, min(int(parameters.get("top_k") or 3), 5))
        hits = self.index.search(query, top_k)
        if not hits:
            return ToolResponse(text=f"No results for {query!r}."), 0.0, {"hits": 0}
        text = "\n\n".join(f"[{i + 1}] {doc['title']}: {doc['text']}" for i, (_, doc) in enumerate(hits))
        return ToolResponse(text=text), 0.0, {"hits": len(hits), "ids": [d["id"] for _, d in hits]}
