"""The program evalpipe's sandbox runs to resolve steps of BFCL multi-turn entries (sent by
evalpipe/tasks/bfcl/multiturn.py; never imported by evalpipe): what
`inference_multi_turn_prompting` does with each completion. In prompting mode the generic
handler's decoder (`decode_execute`, which is `default_decode_execute_prompting` for the OSS
handlers; imported alone, since importing the handler class costs a second a step) reads the
text as calls; in handler mode the registered model's handler reads the response
(`_parse_query_response_prompting`), decodes it, adds the assistant's and the tools' messages to
its chat (`_add_assistant_message_prompting`, `_add_execution_results_prompting`) and formats the
next prompt (`_format_prompt`), as `bfcl generate` does; in native mode the step's text is its
FC response (multiturn.py: its parsed calls as [{name: arguments JSON}], or its words),
decoded as BFCL's OpenAI FC handlers decode one (their `decode_execute` is
`convert_to_function_call`; imported alone, as above). `execute_multi_turn_func_call` `eval`s
the calls against BFCL's simulated APIs: hence here.

BFCL keeps each entry's API instances in its module's globals. This process is fresh, so it
first replays the entry's recorded calls, step by step, against new instances loaded from the
entry's `initial_config`: the state the recorded steps left, as BFCL's own process held it
(the APIs draw from random generators seeded by the scenario, and the results of the replayed
calls are compared with the recorded ones: `replay_equal`).

A memory entry (memory_kv, memory_vector, memory_rec_sum) loads the memory its prerequisites
left as BFCL loads it: its item's `memory` holds the snapshot (or null), written where BFCL's
`MemoryAPI._prepare_snapshot` reads it (`{scenario}_final.json` under this process's result
folder, its initial_config as `populate_initial_settings_for_memory_test_cases` builds it). A
prerequisite conversation's step that ends it (`memory.flush_if`, for a step with calls and for
one without: the last turn's, or the step limit's) flushes the memory as
`inference_multi_turn_prompting` does (`_flush_memory_to_local_file`) and answers it as
"memory": {"snapshot": the file's JSON, "content": `_dump_core_memory_to_context()`}.

A web search entry (web_search_base, web_search_no_snippet) is resolved in two processes
(multiturn.py): first with "phase": "decode" in the sandbox without network, which answers the
decoded calls alone ({"calls", "decode_error"} per item: BFCL's decoders `eval` parts of the
text), then in the networked sandbox with each item's `decoded` set to that answer, which it
does not trust: each call is executed only if it is a web search function called with literal
keyword arguments (`literal_call`), evaluated then as BFCL evaluates it; any other call is
not executed, answered as BFCL's executor answers a call that raised ("Error during execution:
…", REFUSED) and listed in the item's "refused". Its recorded calls are not replayed: BFCL's
WebSearchAPI keeps no state but its initial_config's `show_snippet` (its two seeded generators
feed simulated errors that bfcl-eval 2026.3.23 has switched off), and a replay would fetch again.

memory_vector's API loads its sentence-transformers encoder when imported: from the hub cache
stdin's "hub" names (the sandbox shows its folder), offline.

stdin: {"path": the runner's import paths, "bfcl": bfcl-eval's folder, "hub": the hub cache
holding memory_vector's encoder (null for the others), "certificates" (web search: {variable:
the CA bundle the user's REQUESTS_CA_BUNDLE or SSL_CERT_FILE names, written here, since the
sandbox hides /tmp and home folders}), "mode": "prompting" |
"handler" | "native", "model": the registered model (handler mode; otherwise the name BFCL
keys instances by), "config": the model's settings (entries_program.config_of: its handler's module,
class and arguments), "items": [{category, id, initial_config, involved_classes, replay: [{calls,
results}], text, memory (memory entries: {scenario, prereq, snapshot, flush_if: {call,
no_call}})}]}; in handler mode each item also has `functions`, `chat` (the handler's
messages before the step) and `next_turn` (the user messages of the turn after the step's, or
null after the last), and an item whose `text` is null only asks for the prompt of `chat`.
stdout's last line: per item, {"calls": the decoded calls ([] when none), "results": their
execution results, "decode_error": the decoder's error or null, "replay_equal": bool; a web
search step with calls also "refused": the calls not executed}; in
handler mode also "response" (the handler's reading of the text, what BFCL's result file keeps
of the step), "messages" (what the step added to the handler's chat) and "prompt" (the next
request's text: the chat with the step's messages, then the next turn's when it made no call).
"""

import ast
import importlib
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

# BFCL's web search functions (WebSearchAPI's public methods), the only calls a networked step
# executes, and what it answers for any other (the shape of BFCL's answer to a call that raised).
WEB_FUNCTIONS = ("search_engine_query", "fetch_url_content")
REFUSED = (
    "Error during execution: evalpipe did not execute this call: with the network, it executes "
    "only search_engine_query and fetch_url_content with literal keyword arguments."
)


def literal_call(call):
    """Whether `call` is NAME(kw=LITERAL, ...), NAME a web search function and every value
    one `ast.literal_eval` reads: BFCL's `eval` of it then calls that function on those values
    and runs nothing else (its rewriting of names before `(` only lengthens a name or the text
    inside a string)."""
    try:
        node = ast.parse(call, mode="eval").body
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in WEB_FUNCTIONS and not node.args):  # fmt: skip
            return False
        for keyword in node.keywords:
            if keyword.arg is None:
                return False
            ast.literal_eval(keyword.value)
    except Exception:  # not a string, not Python, not literal, too deep
        return False
    return True


def gated(calls, execute):
    """The results of `calls`, each literal web search call executed in order, every other
    answered REFUSED; and the refused calls."""
    results, refused = [], []
    for call in calls:
        if literal_call(call):
            results += execute([call])[0]
        else:
            results.append(REFUSED)
            refused.append(call)
    return results, refused


def memory_config(item, root):
    """A memory entry's initial_config, its snapshot (if any) written where BFCL loads it."""
    from bfcl_eval.utils import extract_test_category_from_id, get_directory_structure_by_id

    memory, folder = item["memory"], Path(root) / "result"
    if memory["snapshot"] is not None:
        snapshots = folder / get_directory_structure_by_id(item["id"]) / "memory_snapshot"
        snapshots.mkdir(parents=True, exist_ok=True)
        path = snapshots / f"{memory['scenario']}_final.json"
        path.write_text(json.dumps(memory["snapshot"]))
    config = {"model_result_dir": folder, "scenario": memory["scenario"], "test_id": item["id"],
              "test_category": extract_test_category_from_id(item["id"])}  # fmt: skip
    return {item["involved_classes"][0]: config}


def flushed(instances):
    """The memory of a prerequisite conversation's end, as BFCL flushes it."""
    (instance,) = instances.values()
    instance._flush_memory_to_local_file()
    return {"snapshot": json.loads(instance.latest_snapshot_file.read_text()),
            "content": instance._dump_core_memory_to_context()}  # fmt: skip


def main():
    given = json.load(sys.stdin)
    sys.path[:0] = given["path"]
    sys.path.append(given["bfcl"])
    root = os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp(prefix="bfcl-")  # the sandbox's /tmp
    for variable, text in given.get("certificates", {}).items():  # where requests reads them
        path = os.environ[variable] = os.path.join(root, f"{variable}.pem")
        Path(path).write_text(text)
    if given.get("hub"):  # read when memory_vector's API is imported; never the network
        os.environ.update(HF_HUB_CACHE=given["hub"], HF_HUB_OFFLINE="1")
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
        is_empty_execute_response,
    )
    from bfcl_eval.utils import is_web_search

    handler = None
    if given["mode"] == "handler":  # its module alone: importing every handler takes seconds
        config = given["config"]
        built = getattr(importlib.import_module(config["module"]), config["name"])
        handler = built(
            model_name=config["model_name"], temperature=0.001,
            registry_name=given["model"], is_fc_model=config["is_fc_model"],
        )  # fmt: skip
        decode = handler.decode_execute
    elif given["mode"] == "native":
        from bfcl_eval.model_handler.utils import convert_to_function_call

        def decode(response, has_tool_call_tag):
            return convert_to_function_call(response)

    else:
        from bfcl_eval.model_handler.utils import default_decode_execute_prompting as decode

    usage = SimpleNamespace(prompt_tokens=0, completion_tokens=0)
    out = []
    for item in given["items"]:
        memory = item.get("memory")
        config = memory_config(item, root) if memory else item["initial_config"]

        def execute(calls, item=item, config=config):
            return execute_multi_turn_func_call(
                calls, config, item["involved_classes"], given["model"],
                item["id"], long_context="long_context" in item["category"], is_evaL_run=False,
            )  # fmt: skip

        if item["text"] is None:  # a resumed entry's next prompt
            out.append({"prompt": handler._format_prompt(item["chat"], item["functions"])})
            continue
        found = {"calls": [], "results": [], "decode_error": None, "replay_equal": True}
        text, read = item["text"], {}
        if handler is not None:  # what `bfcl generate` records of the response
            response = SimpleNamespace(choices=[SimpleNamespace(text=text)], usage=usage)
            read = handler._parse_query_response_prompting(response)
            text = found["response"] = read["model_responses"]
        decoded = item.get("decoded")
        if decoded is not None:  # by the decoding process (web search), untrusted: gated below
            calls, found["decode_error"] = decoded["calls"], decoded["decode_error"]
        else:
            try:
                calls = decode(text, has_tool_call_tag=False)
            except Exception as exc:  # BFCL: the turn ends
                found["decode_error"] = str(exc)
                calls = []
        if given.get("phase") == "decode":
            out.append({"calls": calls, "decode_error": found["decode_error"]})
            continue
        made = not is_empty_execute_response(calls)
        flush = memory and memory["prereq"] and memory["flush_if"]["call" if made else "no_call"]
        if made or flush:
            for step in item["replay"]:
                found["replay_equal"] &= execute(step["calls"])[0] == step["results"]
        if made and is_web_search(item["category"]):
            found["calls"], (found["results"], found["refused"]) = calls, gated(calls, execute)
        elif made:
            found["calls"], found["results"] = calls, execute(calls)[0]
        if flush:
            found["memory"] = flushed(execute([])[1])
        if handler is not None:
            data = {"message": list(item["chat"]), "function": item["functions"]}
            data = handler._add_assistant_message_prompting(data, read)
            if made:
                read["model_responses_decoded"] = calls
                data = handler._add_execution_results_prompting(data, found["results"], read)
            found["messages"] = data["message"][len(item["chat"]) :]
            if not made and item["next_turn"]:
                data = handler._add_next_turn_user_message_prompting(data, item["next_turn"])
            found["prompt"] = handler._format_prompt(data["message"], data["function"])
        out.append(found)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
