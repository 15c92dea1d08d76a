//! A scripted mock of the Anthropic Messages API, so the real Claude Code can be
//! driven in tests with no key and no network beyond 127.0.0.1.
//!
//! ```ignore
//! let mock = MockAnthropic::start(
//!     Script::new()
//!         .tool("Read", json!({"file_path": "/abs/calc.py"}))   // turn 0
//!         .tool("Edit", json!({ /* … */ }))                     // turn 1
//!         .text(r#"{"fixed": true}"#),                          // turn 2
//! );
//! // run `claude` with ANTHROPIC_BASE_URL=mock.url(), a fake ANTHROPIC_API_KEY, …
//! assert_eq!(mock.messages_requests().len(), 3);
//! // dropping `mock` stops the server and joins its threads
//! ```
//!
//! What it serves (what Claude Code 2.1.x was observed to need, docs/agent-clis-observed.md):
//! - `HEAD` (its connectivity probe) and any `GET`: 200, empty JSON.
//! - `POST /v1/messages` (any query, e.g. `?beta=true`): the turn is chosen by counting
//!   the `tool_result` blocks in the request's `messages` (turn 0: none yet), so a retried
//!   request gets the same answer. Streaming requests get server-sent events
//!   (`message_start` with `usage`, `ping`, `content_block_start/delta/stop`, `message_delta`
//!   with `stop_reason` and `usage.output_tokens`, `message_stop`); `"stream": false` gets
//!   the same message as one JSON object. A turn past the script's end gets 400
//!   `invalid_request_error` "mock script has no turn N", so an unexpected extra turn fails loudly.
//! - `POST /v1/messages/count_tokens`: `{"input_tokens": INPUT_TOKENS}`.
//! - Several conversations ([`Script::route`]): each gets the turns of the first route whose
//!   marker is in its `messages` (e.g. "You are the planner" / "You are the executor" from
//!   modix's prompts), so one mock serves every agent of a `modix go` run.
//! - Errors: [`Script::error`] answers every `POST /v1/messages` with an Anthropic-style error
//!   ([`ApiError`]); [`Script::fail_first`] only the first N, then follows the script.
//!
//! Bounds, so a test never hangs: at most [`Script::max_requests`] requests are answered
//! (later ones get 503 and the connection closes), the server stops accepting after
//! [`Script::time_limit`], each connection has a 5 s read timeout, and every response
//! closes its connection (`Connection: close`). Dropping the mock stops it and joins every thread.
//!
//! Usage numbers are fixed so tests can assert sums: each answer reports
//! `input_tokens: INPUT_TOKENS` and `output_tokens: OUTPUT_TOKENS`.
//!
//! The same server also speaks OpenAI's Responses API for Codex ([`Script::openai`]):
//! `POST /v1/responses` answers with its streaming events (`response.created`,
//! `response.output_item.added`, `response.output_text.delta` or
//! `response.function_call_arguments.delta`, `response.output_item.done`,
//! `response.completed` with `usage`); the turn is the number of `function_call_output`
//! items in the request's `input`; errors get an OpenAI-style body
//! (`{"error": {"message", "type", "param", "code"}}`). A WebSocket upgrade
//! (`GET /v1/responses`) gets 404, which makes Codex fall back to HTTPS after its
//! reconnect attempts; a custom Codex provider (see tests/cli/real_clis.rs) never tries one.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `usage.input_tokens` reported in every answer.
pub const INPUT_TOKENS: u64 = 100;
/// `usage.output_tokens` reported in every answer.
pub const OUTPUT_TOKENS: u64 = 10;

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Turn {
    /// A text answer; `stop_reason: end_turn`.
    Text(String),
    /// One tool call (`tool_use` block with id `toolu_mock_N`); `stop_reason: tool_use`.
    Tool { name: String, input: Value },
}

/// An Anthropic-style HTTP error answer.
#[derive(Clone, Debug)]
pub enum ApiError {
    /// 529 `overloaded_error` "Overloaded".
    Overloaded,
    /// 429 `rate_limit_error` with a `retry-after` header (seconds).
    RateLimited { retry_after_secs: u32 },
    /// 401 `authentication_error` "invalid x-api-key".
    Unauthorized,
    /// Any status, error type and message.
    Other {
        status: u16,
        kind: String,
        message: String,
    },
}

impl ApiError {
    fn status(&self) -> u16 {
        match self {
            ApiError::Overloaded => 529,
            ApiError::RateLimited { .. } => 429,
            ApiError::Unauthorized => 401,
            ApiError::Other { status, .. } => *status,
        }
    }

    fn body(&self, api: Api) -> Value {
        let (kind, message) = match self {
            ApiError::Overloaded => ("overloaded_error", "Overloaded"),
            ApiError::RateLimited { .. } => (
                "rate_limit_error",
                "This request would exceed the rate limit for your organization",
            ),
            ApiError::Unauthorized => ("authentication_error", "invalid x-api-key"),
            ApiError::Other { kind, message, .. } => (kind.as_str(), message.as_str()),
        };
        match api {
            Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
            Api::OpenAiResponses => {
                json!({"error": {"message": message, "type": kind, "param": null, "code": kind}})
            }
        }
    }

    fn extra_headers(&self) -> Vec<(String, String)> {
        match self {
            ApiError::RateLimited { retry_after_secs } => {
                vec![("retry-after".into(), retry_after_secs.to_string())]
            }
            _ => Vec::new(),
        }
    }
}

/// Which API the mock speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages (`POST /v1/messages`), for Claude Code.
    Anthropic,
    /// OpenAI Responses (`POST /v1/responses`), for Codex.
    OpenAiResponses,
}

/// What the mock answers, and its bounds.
#[derive(Clone, Debug)]
pub struct Script {
    api: Api,
    turns: Vec<Turn>,
    /// Conversations told apart by a marker in their messages, each with its turns.
    routes: Vec<(String, Vec<Turn>)>,
    /// Answer the first `.0` message requests with `.1` (`usize::MAX`: all of them).
    error: Option<(usize, ApiError)>,
    max_requests: usize,
    time_limit: Duration,
}

impl Default for Script {
    fn default() -> Self {
        Self::new()
    }
}

impl Script {
    /// Anthropic Messages API; no turns yet; at most 50 requests; stops accepting after 60 s.
    pub fn new() -> Self {
        Script {
            api: Api::Anthropic,
            turns: Vec::new(),
            routes: Vec::new(),
            error: None,
            max_requests: 50,
            time_limit: Duration::from_secs(60),
        }
    }

    /// Like [`Script::new`], but speaking OpenAI's Responses API (for Codex).
    pub fn openai() -> Self {
        Script {
            api: Api::OpenAiResponses,
            ..Script::new()
        }
    }

    /// Every model request gets this error (keeps the API chosen so far).
    pub fn always(self, err: ApiError) -> Self {
        self.fail_first(usize::MAX, err)
    }

    /// Appends a text answer.
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.turns.push(Turn::Text(text.into()));
        self
    }

    /// Appends one tool call.
    pub fn tool(mut self, name: impl Into<String>, input: Value) -> Self {
        self.turns.push(Turn::Tool {
            name: name.into(),
            input,
        });
        self
    }

    /// A conversation whose `messages` hold `marker` gets `turns`' turns (the
    /// first matching route wins; others get this script's own turns).
    pub fn route(mut self, marker: impl Into<String>, turns: Script) -> Self {
        self.routes.push((marker.into(), turns.turns));
        self
    }

    /// The turns for this request's conversation.
    fn turns_for(&self, req: &Request) -> &[Turn] {
        let text = req.body["messages"].to_string();
        self.routes
            .iter()
            .find(|(marker, _)| text.contains(marker.as_str()))
            .map_or(&self.turns, |(_, turns)| turns)
    }

    /// Every `POST /v1/messages` gets this error (Anthropic API).
    pub fn error(err: ApiError) -> Self {
        Script::new().always(err)
    }

    /// The first `n` model requests get this error; later ones follow the turns.
    pub fn fail_first(mut self, n: usize, err: ApiError) -> Self {
        self.error = Some((n, err));
        self
    }

    /// Requests answered at most (of any kind); later ones get 503.
    pub fn max_requests(mut self, n: usize) -> Self {
        self.max_requests = n;
        self
    }

    /// The server stops accepting connections this long after start.
    pub fn time_limit(mut self, d: Duration) -> Self {
        self.time_limit = d;
        self
    }
}

/// One request the mock received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// The query string without `?` (e.g. `beta=true`), if any.
    pub query: Option<String>,
    /// Every header, names lower-cased (e.g. `x-api-key`, `anthropic-version`,
    /// `anthropic-beta`, `user-agent`, `x-stainless-retry-count`).
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON; `Null` when empty or not JSON.
    pub body: Value,
    /// HTTP status the mock answered with.
    pub status: u16,
}

impl Request {
    /// `POST /v1/messages`.
    pub fn is_messages(&self) -> bool {
        self.method == "POST" && self.path == "/v1/messages"
    }

    /// `POST /v1/responses`.
    pub fn is_responses(&self) -> bool {
        self.method == "POST" && self.path == "/v1/responses"
    }

    /// The number of `tool_result` blocks in the body's `messages` (= the turn answered).
    pub fn tool_results(&self) -> usize {
        count_tool_results(&self.body)
    }

    /// The number of `function_call_output` items in the body's `input` (Responses API turn).
    pub fn function_call_outputs(&self) -> usize {
        self.body["input"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|i| i["type"] == "function_call_output")
                .count()
        })
    }
}

struct Shared {
    script: Script,
    requests: Mutex<Vec<Request>>,
    /// Requests received (answered or refused), for the bound.
    seen: AtomicUsize,
    /// Message requests received, for `fail_first`.
    messages_seen: AtomicUsize,
    stop: AtomicBool,
    deadline: Instant,
}

/// The running mock; see the module doc. Dropping it stops the server.
pub struct MockAnthropic {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl MockAnthropic {
    /// Binds `127.0.0.1:0` and serves `script` on background threads.
    pub fn start(script: Script) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        // Non-blocking accept lets the loop notice `stop` and the deadline without a wake-up connection.
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            deadline: Instant::now() + script.time_limit,
            script,
            requests: Mutex::new(Vec::new()),
            seen: AtomicUsize::new(0),
            messages_seen: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || accept_loop(listener, shared))
        };
        MockAnthropic {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT` (for `ANTHROPIC_BASE_URL`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().expect("lock").clone()
    }

    /// The `POST /v1/messages` requests so far.
    pub fn messages_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_messages)
            .collect()
    }

    /// The `POST /v1/responses` requests so far (OpenAI flavour).
    pub fn responses_requests(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(Request::is_responses)
            .collect()
    }
}

impl Drop for MockAnthropic {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut workers: Vec<JoinHandle<()>> = Vec::new();
    // Connections are bounded too: a client that opens sockets and sends nothing
    // must not make the mock spawn threads without end.
    let max_connections = shared.script.max_requests.saturating_mul(2).max(4);
    while !shared.stop.load(Ordering::SeqCst) && Instant::now() < shared.deadline {
        match listener.accept() {
            Ok((stream, _)) if workers.len() < max_connections => {
                let shared = Arc::clone(&shared);
                workers.push(std::thread::spawn(move || serve(stream, &shared)));
            }
            Ok((stream, _)) => drop(stream),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    drop(listener);
    // Each worker ends within its read timeout at worst.
    for w in workers {
        let _ = w.join();
    }
}

/// Answers the requests of one connection until it closes, the bound is reached or the mock stops.
fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut out = write_half;
    let Some(mut req) = read_request(&mut reader) else {
        return;
    };
    let n = shared.seen.fetch_add(1, Ordering::SeqCst);
    let response = if n >= shared.script.max_requests || shared.stop.load(Ordering::SeqCst) {
        error_response(
            &ApiError::Other {
                status: 503,
                kind: "api_error".into(),
                message: format!(
                    "mock request bound reached ({} requests)",
                    shared.script.max_requests
                ),
            },
            shared.script.api,
        )
    } else {
        respond(&req, shared)
    };
    req.status = response.status;
    shared.requests.lock().expect("lock").push(req);
    let _ = out.write_all(&response.bytes);
    let _ = out.flush();
    // `Connection: close` was announced: one request per connection keeps the server simple.
    let _ = out.shutdown(std::net::Shutdown::Both);
}

struct Response {
    status: u16,
    bytes: Vec<u8>,
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Error",
    }
}

fn head(status: u16, content_type: &str, extra: &[(String, String)]) -> String {
    let mut h = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\nconnection: close\r\nrequest-id: req_mock\r\n",
        reason(status)
    );
    for (k, v) in extra {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h
}

fn json_response(status: u16, body: &Value, extra: &[(String, String)]) -> Response {
    let body = body.to_string();
    let mut bytes = head(status, "application/json", extra);
    bytes.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    Response {
        status,
        bytes: bytes.into_bytes(),
    }
}

fn error_response(err: &ApiError, api: Api) -> Response {
    json_response(err.status(), &err.body(api), &err.extra_headers())
}

fn respond(req: &Request, shared: &Shared) -> Response {
    let api = shared.script.api;
    let model_request = match api {
        Api::Anthropic => req.is_messages(),
        Api::OpenAiResponses => req.is_responses(),
    };
    match (req.method.as_str(), req.path.as_str()) {
        ("HEAD", _) => {
            let bytes = format!(
                "{}content-length: 0\r\n\r\n",
                head(200, "application/json", &[])
            );
            Response {
                status: 200,
                bytes: bytes.into_bytes(),
            }
        }
        // Codex tries a WebSocket first; refusing the upgrade sends it to HTTPS.
        ("GET", _)
            if req
                .headers
                .get("upgrade")
                .is_some_and(|u| u.eq_ignore_ascii_case("websocket")) =>
        {
            error_response(
                &ApiError::Other {
                    status: 404,
                    kind: "not_found_error".into(),
                    message: "mock serves no WebSocket".into(),
                },
                api,
            )
        }
        ("GET", _) => json_response(200, &json!({}), &[]),
        ("POST", "/v1/messages/count_tokens") => {
            json_response(200, &json!({"input_tokens": INPUT_TOKENS}), &[])
        }
        _ if model_request => {
            let k = shared.messages_seen.fetch_add(1, Ordering::SeqCst);
            if let Some((n, err)) = &shared.script.error
                && k < *n
            {
                return error_response(err, api);
            }
            let turn_no = match api {
                Api::Anthropic => req.tool_results(),
                Api::OpenAiResponses => req.function_call_outputs(),
            };
            let Some(turn) = shared.script.turns_for(req).get(turn_no) else {
                return error_response(
                    &ApiError::Other {
                        status: 400,
                        kind: "invalid_request_error".into(),
                        message: format!("mock script has no turn {turn_no}"),
                    },
                    api,
                );
            };
            let model = req.body["model"].as_str().unwrap_or("mock-model");
            match (api, req.body["stream"].as_bool() == Some(true)) {
                (Api::Anthropic, true) => sse_response(turn, turn_no, model),
                (Api::Anthropic, false) => {
                    json_response(200, &whole_message(turn, turn_no, model), &[])
                }
                (Api::OpenAiResponses, _) => responses_sse(turn, turn_no, model),
            }
        }
        _ => error_response(
            &ApiError::Other {
                status: 404,
                kind: "not_found_error".into(),
                message: format!("mock has no {} {}", req.method, req.path),
            },
            api,
        ),
    }
}

fn count_tool_results(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|msgs| {
            msgs.iter()
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .count()
        })
        .unwrap_or(0)
}

fn usage(output_tokens: u64) -> Value {
    json!({
        "input_tokens": INPUT_TOKENS,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    })
}

fn tool_id(turn_no: usize) -> String {
    format!("toolu_mock_{turn_no:02}")
}

/// The answer as one `message` object (for `"stream": false`).
fn whole_message(turn: &Turn, turn_no: usize, model: &str) -> Value {
    let (content, stop) = match turn {
        Turn::Text(t) => (json!([{"type": "text", "text": t}]), "end_turn"),
        Turn::Tool { name, input } => (
            json!([{"type": "tool_use", "id": tool_id(turn_no), "name": name, "input": input}]),
            "tool_use",
        ),
    };
    json!({
        "id": format!("msg_mock_{turn_no:02}"), "type": "message", "role": "assistant",
        "model": model, "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": usage(OUTPUT_TOKENS),
    })
}

/// Splits `s` into pieces of about `n` bytes on char boundaries (deltas arrive in chunks in reality).
fn chunks(s: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < s.len() {
        let mut end = (start + n).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[start..end]);
        start = end;
    }
    out
}

fn sse_response(turn: &Turn, turn_no: usize, model: &str) -> Response {
    let mut events: Vec<(&str, Value)> = Vec::new();
    events.push((
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_mock_{turn_no:02}"), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage(1),
        }}),
    ));
    events.push(("ping", json!({"type": "ping"})));
    let stop = match turn {
        Turn::Text(text) => {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in chunks(text, 16) {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": piece}}),
                ));
            }
            "end_turn"
        }
        Turn::Tool { name, input } => {
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block":
                       {"type": "tool_use", "id": tool_id(turn_no), "name": name, "input": {}}}),
            ));
            let input = input.to_string();
            for piece in chunks(&input, 16) {
                events.push((
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
            "tool_use"
        }
    };
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": OUTPUT_TOKENS}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    // No content-length: the body ends when the connection closes (HTTP/1.1 allows it
    // with `Connection: close`), as a stream does.
    let mut bytes = head(200, "text/event-stream", &[]);
    bytes.push_str("cache-control: no-cache\r\n\r\n");
    for (name, data) in events {
        bytes.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    Response {
        status: 200,
        bytes: bytes.into_bytes(),
    }
}

/// An OpenAI Responses API stream for one turn (what Codex reads).
fn responses_sse(turn: &Turn, turn_no: usize, model: &str) -> Response {
    let resp_id = format!("resp_mock_{turn_no:02}");
    let mut events: Vec<Value> = vec![json!({"type": "response.created",
        "response": {"id": resp_id, "object": "response", "status": "in_progress", "model": model}})];
    match turn {
        Turn::Text(text) => {
            let id = format!("msg_mock_{turn_no:02}");
            events.push(json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []}}));
            for piece in chunks(text, 16) {
                events.push(json!({"type": "response.output_text.delta", "item_id": id,
                    "output_index": 0, "content_index": 0, "delta": piece}));
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0,
                "item": {"type": "message", "id": id, "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
            );
        }
        Turn::Tool { name, input } => {
            let id = format!("fc_mock_{turn_no:02}");
            let call_id = format!("call_mock_{turn_no:02}");
            let args = input.to_string();
            events.push(
                json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name,
                         "arguments": "", "status": "in_progress"}}),
            );
            for piece in chunks(&args, 16) {
                events.push(json!({"type": "response.function_call_arguments.delta",
                    "item_id": id, "output_index": 0, "delta": piece}));
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": 0,
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name,
                         "arguments": args, "status": "completed"}}),
            );
        }
    }
    events.push(json!({"type": "response.completed", "response": {
        "id": resp_id, "object": "response", "status": "completed", "model": model,
        "usage": {"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}}}));
    let mut bytes = head(200, "text/event-stream", &[]);
    bytes.push_str("cache-control: no-cache\r\n\r\n");
    for e in events {
        bytes.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap_or("")
        ));
    }
    Response {
        status: 200,
        bytes: bytes.into_bytes(),
    }
}

/// Reads one request (head and body, `content-length` or chunked). `None` on EOF, timeout or garbage.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
    }
    // A body is bounded too (Claude Code's requests are ~100 KB: system prompt + tool schemas).
    const MAX_BODY: usize = 16 << 20;
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            if size == 0 || body.len() + size > MAX_BODY {
                let mut crlf = String::new();
                let _ = r.read_line(&mut crlf);
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk).ok()?;
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(len) = headers.get("content-length") {
        let len: usize = len.parse().ok()?;
        if len > MAX_BODY {
            return None;
        }
        body = vec![0; len];
        r.read_exact(&mut body).ok()?;
    }
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (target, None),
    };
    Some(Request {
        method,
        path,
        query,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        status: 0,
    })
}

// The mock on its own, with a plain TCP client: these run everywhere (no CLI needed).
#[cfg(test)]
mod tests {
    use super::*;

    /// Sends one raw HTTP/1.1 request and returns (status, headers+body text).
    fn call(url: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        let addr = url.trim_start_matches("http://");
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: sk-fake\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read");
        let status = text.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, text)
    }

    /// The `data:` payloads of an SSE body.
    fn sse_data(text: &str) -> Vec<Value> {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).expect("json data"))
            .collect()
    }

    fn messages(tool_results: usize) -> Value {
        let mut msgs = vec![json!({"role": "user", "content": "fix it"})];
        for i in 0..tool_results {
            msgs.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": tool_id(i), "name": "Read", "input": {}}]}));
            msgs.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id(i), "content": "ok"}]}));
        }
        json!({"model": "claude-sonnet-mock", "stream": true, "messages": msgs})
    }

    #[test]
    fn mock_anthropic_turns_follow_tool_results() {
        let mock = MockAnthropic::start(
            Script::new()
                .tool("Read", json!({"file_path": "/tmp/x.py"}))
                .text("all done {\"ok\": true}"),
        );
        assert_eq!(call(&mock.url(), "HEAD", "/", None).0, 200);
        assert_eq!(call(&mock.url(), "GET", "/anything", None).0, 200);

        let (status, text) = call(
            &mock.url(),
            "POST",
            "/v1/messages?beta=true",
            Some(&messages(0)),
        );
        assert_eq!(status, 200);
        assert!(text.contains("content-type: text/event-stream"), "{text}");
        let events = sse_data(&text);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds.first(), Some(&"message_start"));
        assert_eq!(kinds.last(), Some(&"message_stop"));
        assert_eq!(events[0]["message"]["usage"]["input_tokens"], INPUT_TOKENS);
        assert_eq!(events[2]["content_block"]["type"], "tool_use");
        assert_eq!(events[2]["content_block"]["input"], json!({}));
        let input: String = events
            .iter()
            .filter_map(|e| e["delta"]["partial_json"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&input).unwrap(),
            json!({"file_path": "/tmp/x.py"})
        );
        assert!(
            events
                .iter()
                .filter(|e| e["type"] == "content_block_delta")
                .count()
                > 1,
            "input JSON arrives in chunks"
        );
        let delta = events
            .iter()
            .find(|e| e["type"] == "message_delta")
            .unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(delta["usage"]["output_tokens"], OUTPUT_TOKENS);

        let (_, text) = call(&mock.url(), "POST", "/v1/messages", Some(&messages(1)));
        let events = sse_data(&text);
        let said: String = events
            .iter()
            .filter_map(|e| e["delta"]["text"].as_str())
            .collect();
        assert_eq!(said, "all done {\"ok\": true}");
        assert_eq!(
            events
                .iter()
                .find(|e| e["type"] == "message_delta")
                .unwrap()["delta"]["stop_reason"],
            "end_turn"
        );

        // Past the script: a loud 400, not a hang or a repeat.
        let (status, text) = call(&mock.url(), "POST", "/v1/messages", Some(&messages(2)));
        assert_eq!(status, 400);
        assert!(text.contains("mock script has no turn 2"), "{text}");

        let mut plain = messages(1);
        plain["stream"] = json!(false);
        let (status, text) = call(&mock.url(), "POST", "/v1/messages", Some(&plain));
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["content"][0]["text"], "all done {\"ok\": true}");

        let reqs = mock.requests();
        assert_eq!(reqs.len(), 6);
        assert_eq!(reqs[0].method, "HEAD");
        assert_eq!(reqs[2].query.as_deref(), Some("beta=true"));
        assert_eq!(reqs[2].headers["x-api-key"], "sk-fake");
        assert_eq!(reqs[3].tool_results(), 1);
        assert_eq!(mock.messages_requests().len(), 4);
    }

    #[test]
    fn mock_anthropic_errors_are_anthropic_shaped() {
        let cases = [
            (ApiError::Overloaded, 529, "overloaded_error", None),
            (
                ApiError::RateLimited {
                    retry_after_secs: 7,
                },
                429,
                "rate_limit_error",
                Some("retry-after: 7"),
            ),
            (ApiError::Unauthorized, 401, "authentication_error", None),
        ];
        for (err, status, kind, header) in cases {
            let mock = MockAnthropic::start(Script::error(err));
            let (got, text) = call(&mock.url(), "POST", "/v1/messages", Some(&messages(0)));
            assert_eq!(got, status);
            if let Some(h) = header {
                assert!(text.contains(h), "{text}");
            }
            let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["type"], kind);
        }

        // fail_first: an error, then the script.
        let mock =
            MockAnthropic::start(Script::new().text("hi").fail_first(1, ApiError::Overloaded));
        let url = mock.url();
        assert_eq!(
            call(&url, "POST", "/v1/messages", Some(&messages(0))).0,
            529
        );
        assert_eq!(
            call(&url, "POST", "/v1/messages", Some(&messages(0))).0,
            200
        );
        let statuses: Vec<u16> = mock.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [529, 200]);
    }

    #[test]
    fn mock_openai_responses_turns_and_errors() {
        let mock = MockAnthropic::start(
            Script::openai()
                .tool("exec_command", json!({"cmd": "cat calc.py"}))
                .text("done"),
        );
        let url = mock.url();
        let req = |outputs: usize| {
            let mut input = vec![json!({"type": "message", "role": "user", "content": []})];
            for i in 0..outputs {
                input.push(json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "x"}));
            }
            json!({"model": "gpt-mock", "stream": true, "input": input})
        };
        let (status, text) = call(&url, "POST", "/v1/responses", Some(&req(0)));
        assert_eq!(status, 200);
        let events = sse_data(&text);
        assert_eq!(events[0]["type"], "response.created");
        let done = events
            .iter()
            .find(|e| e["type"] == "response.output_item.done")
            .unwrap();
        assert_eq!(done["item"]["type"], "function_call");
        assert_eq!(done["item"]["name"], "exec_command");
        let args: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
        assert_eq!(args, done["item"]["arguments"].as_str().unwrap());
        let last = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["usage"]["output_tokens"], OUTPUT_TOKENS);

        let (_, text) = call(&url, "POST", "/v1/responses", Some(&req(1)));
        let events = sse_data(&text);
        let said: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .filter_map(|e| e["delta"].as_str())
            .collect();
        assert_eq!(said, "done");
        assert_eq!(mock.responses_requests().len(), 2);
        assert_eq!(mock.responses_requests()[1].function_call_outputs(), 1);

        let mock = MockAnthropic::start(Script::openai().always(ApiError::Unauthorized));
        let (status, text) = call(&mock.url(), "POST", "/v1/responses", Some(&req(0)));
        assert_eq!(status, 401);
        let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
        assert_eq!(body["error"]["type"], "authentication_error");
        assert!(body["error"]["message"].is_string());
    }

    #[test]
    fn mock_anthropic_routes_conversations_by_marker() {
        let mock = MockAnthropic::start(
            Script::new()
                .route("You are the planner", Script::new().text("the plan"))
                .route(
                    "You are the executor",
                    Script::new()
                        .tool("Read", json!({"file_path": "a"}))
                        .text("done"),
                )
                .text("no route"),
        );
        let ask = |first: &str, tool_results: usize| {
            let mut body = messages(tool_results);
            body["messages"][0]["content"] = json!(first);
            let (_, text) = call(&mock.url(), "POST", "/v1/messages", Some(&body));
            let events = sse_data(&text);
            let said: String = events
                .iter()
                .filter_map(|e| e["delta"]["text"].as_str())
                .collect();
            let tool = events
                .iter()
                .find_map(|e| e["content_block"]["name"].as_str().map(str::to_owned));
            said + &tool.unwrap_or_default()
        };
        assert_eq!(ask("You are the planner of a loop", 0), "the plan");
        assert_eq!(ask("You are the executor of a loop", 0), "Read");
        assert_eq!(ask("You are the executor of a loop", 1), "done");
        assert_eq!(ask("someone else", 0), "no route");
    }

    #[test]
    fn mock_anthropic_is_bounded() {
        let mock = MockAnthropic::start(
            Script::new()
                .text("x")
                .max_requests(2)
                .time_limit(Duration::from_millis(300)),
        );
        let url = mock.url();
        assert_eq!(call(&url, "GET", "/", None).0, 200);
        assert_eq!(call(&url, "GET", "/", None).0, 200);
        assert_eq!(call(&url, "GET", "/", None).0, 503);
        std::thread::sleep(Duration::from_millis(500));
        // Past its time limit the port is closed: a client fails fast instead of hanging.
        let addr = url.trim_start_matches("http://");
        assert!(TcpStream::connect(addr).is_err());
        let started = Instant::now();
        drop(mock);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
