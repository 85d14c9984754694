//! Integration tests: the gateway over real HTTP on 127.0.0.1 (port 0), in front of mock
//! upstream servers started by each test.

mod admin;
mod affinity;
mod anthropic;
mod budgets;
mod chains;
mod cli;
mod console;
mod context;
mod control;
mod control_ops;
mod credentials;
mod errors;
mod events;
mod failover;
mod forwarding;
mod fuzz;
mod gemini;
mod health;
mod latency;
mod local_embedder;
mod metrics;
mod replicas;
mod request_log;
mod responses;
mod schemas;
mod semantic;
mod semantic_data;
mod semantic_eval;
mod spend;
mod store;
mod streaming;
mod support;
mod tools;
mod traces;
mod usage;
