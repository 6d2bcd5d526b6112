"""Berkeley's function-calling leaderboard (BFCL v4, the `bfcl-eval` package) as evalpipe's
`bfcl` task kind, prompting mode, single-turn categories (docs/bfcl.md).

bfcl-eval lives in its own folder (scripts/bfcl.sh), never imported by evalpipe's process: its
data and prompts are read by a trusted child process (entries_program.py), and its decoder and
AST checker, which `eval` the model's text, run only in evalpipe's sandbox
(checker_program.py)."""
