"""The JavaScript side of a hook context: the sandbox, the `ctx` object, and the call protocol.

A call crosses into V8 as one string handed to one function compiled at start-up, `__yao_rt.entry`
(`"0\\n<snapshot json>\\n<args json>"` calls Create), and comes back as one string, so a hook that uses
no `ctx` method costs exactly one round trip and V8 compiles nothing per call. The first letter of the
answer says what happened:

- `R<json>` the function returned this value; `E<json>` it failed (see `failure` below);
- `P` it returned a promise that has not settled yet;
- `M{"state": "R"|"E"|"P", "calls": [[id, op, args], ...], "body": <json>}` the same three, plus the
  `ctx` calls the hook made since the last answer, which the host must perform.

While a promise is pending the host performs the calls, hands results back (`"d<json>"`) and asks
again (`"p"`). V8 runs promise continuations between two tasks, so each poll sees everything the
hook could do with what it had. Timers, `Atomics`, `WebAssembly` and `FinalizationRegistry` are
removed: nothing can run JavaScript outside those tasks, so a promise still pending when no call is
outstanding will never settle.
"""

from __future__ import annotations

HOOK_URL = "yao-hook-file"  # the name V8 gives the hook's own script in stacks and error reports
RUNTIME_URL = "yao-hook-runtime"
FUNCTIONS = ("Create", "Next", "Guard")

RUNTIME_JS = (
    r"""
(function (G) {
  "use strict";
  const freeze = Object.freeze, create = Object.create, assign = Object.assign, keys = Object.keys;
  const stringify = JSON.stringify, parse = JSON.parse, ErrorCtor = Error, StringCtor = String;
  const withResolvers = Promise.withResolvers.bind(Promise), resolved = Promise.resolve.bind(Promise);
  const then = Promise.prototype.then, apply = Reflect.apply, WeakSetCtor = WeakSet, MapCtor = Map;
  const errorText = Error.prototype.toString, RUNTIME = "@RUNTIME_URL@";

  // Sandbox. Timers and async wake-ups would run hook code outside any call, where no deadline
  // applies. Binary buffers live outside the V8 heap, where the memory limit does not see them (a
  // loop of `new Uint8Array(1e7)` grew past 1 GB under a 32 MB limit). There is no require, import(),
  // fetch, XMLHttpRequest or process to begin with.
  G.setTimeout = undefined;
  G.clearTimeout = undefined;
  G.__timer_manager = undefined;
  for (const name of ["Atomics", "SharedArrayBuffer", "WebAssembly", "FinalizationRegistry", "ArrayBuffer",
                      "DataView", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
                      "Int32Array", "Uint32Array", "Float16Array", "Float32Array", "Float64Array", "BigInt64Array",
                      "BigUint64Array"]) {
    delete G[name];
  }

  // Stacks show the hook's own frames only: the runtime's (where a ctx call was asked for, or the
  // call entered) mean nothing to a hook author. V8 formats a stack when it is first read, so a ctx
  // error whose message is set on delivery still gets that message in its first line.
  Error.prepareStackTrace = (error, frames) => {
    let head;
    try { head = apply(errorText, error, []); } catch (e) { head = "Error"; }
    let text = head;
    for (const frame of frames) {
      if (frame.getScriptNameOrSourceURL() !== RUNTIME) text += "\n    at " + frame;
    }
    return text;
  };

  const hostErrors = new WeakSetCtor();
  let outbox = [], waiting = new MapCtor(), nextId = 0, settled = "", lastSnapshot = null, lastCtx = null;
  let hooks = [];

  function request(op, args) {
    const text = stringify(args);
    const id = ++nextId;
    const { promise, resolve, reject } = withResolvers();
    waiting.set(id, { resolve, reject, origin: new ErrorCtor() });
    outbox.push("[" + id + ',"' + op + '",' + text + "]");
    return promise;
  }

  function show(value) {
    if (typeof value === "string") return value;
    try { const text = stringify(value); if (text !== undefined) return text; } catch (e) { /* falls through */ }
    return StringCtor(value);
  }

  const say = (level) => (...parts) => { request("log", [level, parts.map(show).join(" ")]); };
  const console = freeze({ log: say("info"), info: say("info"), debug: say("debug"), warn: say("warn"),
                           error: say("error") });
  Object.defineProperty(G, "console", { value: console, writable: false, configurable: false });

  const methods = freeze({
    log(level, message) { return request("log", [StringCtor(level), StringCtor(message)]); },
    send(message) { return request("send", [message === undefined ? null : message]); },
    memory: freeze({
      get(key) { return request("mget", [StringCtor(key)]); },
      set(key, value) { return request("mset", [StringCtor(key), value === undefined ? null : value]); },
    }),
    call(assistantId, messages) {
      return request("call", [StringCtor(assistantId), messages === undefined ? null : messages]);
    },
    search(query, options) {
      return request("search", [StringCtor(query), options === undefined ? null : options]);
    },
  });

  function deepFreeze(value) {
    if (value !== null && typeof value === "object") {
      for (const key of keys(value)) deepFreeze(value[key]);
      freeze(value);
    }
    return value;
  }

  function contextFor(snapshot) {
    if (snapshot !== lastSnapshot) {
      lastCtx = freeze(assign(create(methods), deepFreeze(parse(snapshot))));
      lastSnapshot = snapshot;
    }
    return lastCtx;
  }

  function failure(e) {
    try {
      if (hostErrors.has(e) || e instanceof ErrorCtor) {
        const kind = hostErrors.has(e) ? "host" : "throw", stack = StringCtor(e.stack);
        return stringify({ kind, name: StringCtor(e.name), message: StringCtor(e.message), stack });
      }
      return stringify({ kind: "value", message: show(e) });
    } catch (inner) {
      return '{"kind":"value","message":"the hook threw a value that cannot be described"}';
    }
  }

  function finish(value) {
    let text;
    try { text = value === undefined ? "null" : stringify(value); }
    catch (e) { return "E" + stringify({ kind: "json", message: StringCtor(e && e.message) }); }
    if (text === undefined) return 'E{"kind":"json","message":"a ' + typeof value + ' has no JSON form"}';
    return "R" + text;
  }

  function report(answer) {
    if (outbox.length === 0) return answer;
    const calls = outbox.join(",");
    outbox = [];
    const body = answer.length > 1 ? answer.slice(1) : "null";
    return 'M{"state":"' + answer[0] + '","calls":[' + calls + '],"body":' + body + "}";
  }

  function isThenable(value) {
    const type = typeof value;
    return value !== null && (type === "object" || type === "function") && typeof value.then === "function";
  }

  function run(index, snapshot, args) {
    outbox = []; waiting = new MapCtor(); settled = "";
    let result;
    try {
      const hook = hooks[index];  // called plainly: `this` is not our list of hooks
      result = hook(contextFor(snapshot), ...parse(args));
      if (!isThenable(result)) return report(finish(result));
    } catch (e) {
      return report("E" + failure(e));
    }
    apply(then, resolved(result), [(value) => { settled = finish(value); }, (e) => { settled = "E" + failure(e); }]);
    return report("P");
  }

  function poll() {
    const answer = settled || "P";
    settled = "";
    return report(answer);
  }

  function deliver(results) {
    for (const [id, ok, payload] of parse(results)) {
      const entry = waiting.get(id);
      if (entry === undefined) continue;
      waiting.delete(id);
      if (ok) { entry.resolve(payload); continue; }
      const error = entry.origin;  // made where the hook asked, so its stack points there
      error.message = payload;
      hostErrors.add(error);
      entry.reject(error);
    }
    return "";
  }

  function bind(...found) {
    hooks = found;
    return stringify(found.map((f) => typeof f));
  }

  // The one door the host knocks on for calls: `this` is the request string (strict mode keeps it a
  // primitive), so no script is compiled per call. "0\n<snapshot>\n<args>" runs Create (1: Next),
  // "p" polls, "d<results>" delivers.
  function entry() {
    const request = this, command = request[0];
    if (command === "p") return poll();
    if (command === "d") return deliver(request.slice(1));
    const cut = request.indexOf("\n", 2);
    return run(+command, request.slice(2, cut), request.slice(cut + 1));
  }

  const runtime = freeze({ entry, bind });
  Object.defineProperty(G, "__yao_rt", { value: runtime, writable: false, configurable: false });
  return "ready";
})(globalThis);
""".replace("@RUNTIME_URL@", RUNTIME_URL)
    + f"//# sourceURL={RUNTIME_URL}\n"
)

BIND_JS = "__yao_rt.bind({})".format(", ".join(f'typeof {f} === "undefined" ? undefined : {f}' for f in FUNCTIONS))
ENTRY_JS = "__yao_rt.entry"
POLL = "p"


def hook_script(source: str) -> str:
    """The hook file as one script, unchanged, so V8's line numbers are the file's own."""
    return f"{source}\n//# sourceURL={HOOK_URL}\n"


def run_request(function: str, snapshot_json: str, args_json: str) -> str:
    """JSON from `json.dumps` has no raw newline, so newlines can separate the parts."""
    return f"{FUNCTIONS.index(function)}\n{snapshot_json}\n{args_json}"


def deliver_request(results_json: str) -> str:
    return "d" + results_json
