"""The openai SDK's embeddings.create against rillm serving all-MiniLM-L6-v2: its default
(base64, decoded by the SDK) and `float` give the same vectors, in input order, unit length;
a refused `dimensions` is a BadRequestError naming the field."""

import math
import sys

import openai

client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
texts = ["The cat sat on the mat.", "A retrieval pipeline embeds documents.", "Rust", "Café au lait"]

default = client.embeddings.create(model="all-MiniLM-L6-v2.F16", input=texts)  # base64 on the wire
floats = client.embeddings.create(model="all-MiniLM-L6-v2.F16", input=texts, encoding_format="float")
assert [d.index for d in default.data] == list(range(len(texts))), default.data
assert default.usage.prompt_tokens == floats.usage.prompt_tokens > len(texts), default.usage
for a, b in zip(default.data, floats.data, strict=True):
    assert len(a.embedding) == len(b.embedding) == 384
    assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding)) < 1e-6, "base64 and float differ"
    assert abs(math.sqrt(sum(x * x for x in a.embedding)) - 1) < 1e-4, "unit length"

one = client.embeddings.create(model="all-MiniLM-L6-v2.F16", input=texts[2], encoding_format="float")
assert max(abs(x - y) for x, y in zip(one.data[0].embedding, floats.data[2].embedding)) < 1e-4, "alone vs batched"

cat, pipeline, rust = (d.embedding for d in floats.data[:3])
similar = client.embeddings.create(model="all-MiniLM-L6-v2.F16", input="A kitten sits on a rug.").data[0].embedding
cos = lambda u, v: sum(x * y for x, y in zip(u, v))
assert cos(similar, cat) > cos(similar, pipeline) + 0.2, (cos(similar, cat), cos(similar, pipeline))

try:
    client.embeddings.create(model="all-MiniLM-L6-v2.F16", input="x", dimensions=128)
    raise AssertionError("dimensions=128 should be refused")
except openai.BadRequestError as error:
    assert error.body["param"] == "dimensions", error.body

print(f"embeddings via the openai SDK: {len(texts)} inputs, base64 == float, order kept, dimensions refused")
