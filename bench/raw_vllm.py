"""vLLM called directly, the reference side of bench/overhead_vllm.py: nothing but `LLM()` and one
`LLM.chat` (chat models) or `LLM.generate` call over every prompt.

    python bench/raw_vllm.py SPEC.json OUT.json

SPEC: {"llm": LLM() keyword arguments, "sampling": SamplingParams keyword arguments,
"chat": bool, "prompts": [text or chat messages, ...]} (a text sent to a chat model is one user
message). OUT: per prompt the completion texts, token ids and
counts, and the seconds spent importing vLLM, building LLM() and generating.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    t0 = time.perf_counter()
    from vllm import LLM, SamplingParams

    t1 = time.perf_counter()
    llm = LLM(**spec["llm"])
    t2 = time.perf_counter()
    params = SamplingParams(**spec["sampling"])
    if spec["chat"]:
        conversations = [
            [{"role": "user", "content": p}] if isinstance(p, str) else p for p in spec["prompts"]
        ]
        outputs = llm.chat(conversations, params, use_tqdm=False)
    else:
        outputs = llm.generate(spec["prompts"], params, use_tqdm=False)
    t3 = time.perf_counter()
    result = {
        "import_s": t1 - t0,
        "llm_s": t2 - t1,
        "generate_s": t3 - t2,
        "texts": [[c.text for c in o.outputs] for o in outputs],
        "token_ids": [[list(c.token_ids) for c in o.outputs] for o in outputs],
        "completion_tokens": [[len(c.token_ids) for c in o.outputs] for o in outputs],
        "prompt_tokens": [len(o.prompt_token_ids or ()) for o in outputs],
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
