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

stdin: {"path": the runner's import paths, "bfcl": bfcl-eval's folder, "mode": "prompting" |
"handler" | "native", "model": the registered model (handler mode; otherwise the name BFCL
keys instances by), "config": the model's settings (entries_program.config_of: its handler's module,
class and arguments), "items": [{category, id, initial_config, involved_classes, replay: [{calls,
results}], text}]}; in handler mode each item also has `functions`, `chat` (the handler's
messages before the step) and `next_turn` (the user messages of the turn after the step's, or
null after the last), and an item whose `text` is null only asks for the prompt of `chat`.
stdout's last line: per item, {"calls": the decoded calls ([] when none), "results": their
execution results, "decode_error": the decoder's error or null, "replay_equal": bool}; in
handler mode also "response" (the handler's reading of the text, what BFCL's result file keeps
of the step), "messages" (what the step added to the handler's chat) and "prompt" (the next
request's text: the chat with the step's messages, then the next turn's when it made no call).
"""

import importlib
import json
import os
import sys
import tempfile
from types import SimpleNamespace


def main():
    given = json.load(sys.stdin)
    sys.path[:0] = given["path"]
    sys.path.append(given["bfcl"])
    os.environ["BFCL_PROJECT_ROOT"] = tempfile.mkdtemp(prefix="bfcl-")  # the sandbox's /tmp
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
        is_empty_execute_response,
    )

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

        def execute(calls, item=item):
            return execute_multi_turn_func_call(
                calls, item["initial_config"], item["involved_classes"], given["model"],
                item["id"], long_context="long_context" in item["category"], is_evaL_run=False,
            )[0]  # fmt: skip

        if item["text"] is None:  # a resumed entry's next prompt
            out.append({"prompt": handler._format_prompt(item["chat"], item["functions"])})
            continue
        found = {"calls": [], "results": [], "decode_error": None, "replay_equal": True}
        text, read = item["text"], {}
        if handler is not None:  # what `bfcl generate` records of the response
            response = SimpleNamespace(choices=[SimpleNamespace(text=text)], usage=usage)
            read = handler._parse_query_response_prompting(response)
            text = found["response"] = read["model_responses"]
        try:
            calls = decode(text, has_tool_call_tag=False)
        except Exception as exc:  # BFCL: the turn ends
            found["decode_error"] = str(exc)
            calls = []
        made = not is_empty_execute_response(calls)
        if made:
            for step in item["replay"]:
                found["replay_equal"] &= execute(step["calls"]) == step["results"]
            found["calls"], found["results"] = calls, execute(calls)
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
