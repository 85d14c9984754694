#![no_main]

use libfuzzer_sys::fuzz_target;
use switchyard::protocol::Protocol;

fuzz_target!(|data: &[u8]| switchyard::fuzz::ingress_shaped(Protocol::AnthropicMessages, data));
