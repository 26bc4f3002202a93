//! Our forward pass, greedy decoding, tokenizer and chat templates against transformers'
//! outputs recorded by `reference/make_fixtures.py`.

mod common;

use common::*;
use tch::Tensor;
use vagen_model::{ChatTemplate, GenerateOptions, Message};

#[test]
fn logits_match_transformers_in_f32() {
    let expected = Tensor::read_safetensors(fixtures().join("expected.safetensors")).unwrap();
    let e = common::expected();
    for name in ["tiny-qwen2", "tiny-qwen2-tied"] {
        let model = load(name);
        for (i, seq) in e["ids"].as_array().unwrap().iter().enumerate() {
            let want = &expected.iter().find(|(n, _)| *n == format!("{name}.logits.{i}")).unwrap().1;
            let got = logits(&model, &ids(seq));
            assert_eq!(got.size(), want.size());
            let err = relative_error(&got, want);
            eprintln!("{name} sequence {i}: relative error {err:e}");
            assert!(err <= 1e-4, "{name} sequence {i}: relative error {err:e}");
        }
    }
}

#[test]
fn greedy_continuations_are_identical() {
    let e = common::expected();
    let prompts: Vec<Vec<u32>> = e["ids"].as_array().unwrap().iter().map(ids).collect();
    let options = GenerateOptions { max_new_tokens: 12, temperature: 0.0, ..Default::default() };
    for name in ["tiny-qwen2", "tiny-qwen2-tied"] {
        let model = load(name);
        // One prompt at a time, then all three left-padded in one batch.
        for (i, prompt) in prompts.iter().enumerate() {
            let got = model.generate(std::slice::from_ref(prompt), &options).unwrap();
            assert_eq!(got[0].token_ids, ids(&e["greedy"][name][i]), "{name} prompt {i}");
        }
        let batched = model.generate(&prompts, &options).unwrap();
        for (i, g) in batched.iter().enumerate() {
            assert_eq!(g.token_ids, ids(&e["greedy_batched"][name][i]), "{name} batched prompt {i}");
        }
    }
}

#[test]
fn chat_templates_render_byte_identically() {
    let e = common::expected();
    let templates: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("templates.json")).unwrap()).unwrap();
    let specials = [("bos_token", "<s>"), ("eos_token", "</s>")].map(|(k, v)| (k.to_string(), v.to_string())).into();
    let model = load("tiny-qwen2");
    let cases = e["chat"].as_array().unwrap();
    assert!(cases.len() >= 30);
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let template =
            ChatTemplate::new(templates[name].as_str().unwrap(), std::collections::BTreeMap::clone(&specials)).unwrap();
        let messages: Vec<Message> = serde_json::from_value(case["messages"].clone()).unwrap();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let text = template.render(&messages, add).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "{name}, add_generation_prompt={add}: {messages:?}");
        assert_eq!(model.tokenizer.encode(&text).unwrap(), ids(&case["ids"]), "token ids of {text:?}");
    }
}

#[test]
fn chats_with_tools_render_as_transformers_renders_them() {
    // `reference/make_tool_fixtures.py`: tools as sent (keys in their order), calls'
    // arguments decoded, tool messages answering them.
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("tool-chats.json")).unwrap()).unwrap();
    let template = load("tiny-qwen2");
    let template = template.chat_template().unwrap();
    let cases = cases.as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for case in cases {
        let messages: Vec<Message> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let mut message = Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap());
                message.tool_call_id = m["tool_call_id"].as_str().map(String::from);
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    message.tool_calls.push(vagen_model::ToolCall {
                        id: c["id"].as_str().unwrap().into(),
                        name: c["function"]["name"].as_str().unwrap().into(),
                        arguments: c["function"]["arguments"].as_str().unwrap().into(),
                    });
                }
                message
            })
            .collect();
        let tools = case["tools"].as_array().unwrap();
        let add = case["add_generation_prompt"].as_bool().unwrap();
        let text = template.render_chat(&messages, tools, false, add).unwrap();
        assert_eq!(text, case["text"].as_str().unwrap(), "add_generation_prompt={add}: {messages:?}");
    }
}

#[test]
fn the_folder_template_is_the_one_transformers_uses() {
    // tiny-qwen2 keeps its template in chat_template.jinja (transformers 5 layout).
    let e = common::expected();
    let model = load("tiny-qwen2");
    let case = e["chat"].as_array().unwrap().iter().find(|c| c["template"] == "qwen2.5").unwrap();
    let messages: Vec<Message> = serde_json::from_value(case["messages"].clone()).unwrap();
    let text = model.chat_template().unwrap().render(&messages, case["add_generation_prompt"].as_bool().unwrap());
    assert_eq!(text.unwrap(), case["text"].as_str().unwrap());
}

#[test]
fn template_errors_name_the_problem() {
    let templates: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("templates.json")).unwrap()).unwrap();
    let t = ChatTemplate::new(templates["thinking"].as_str().unwrap(), Default::default()).unwrap();
    let err = t.render(&[Message::new("robot", "hi")], false).unwrap_err().to_string();
    assert!(err.contains("unknown role robot"), "{err}");
    let err = ChatTemplate::new("{% for m in messages %}", Default::default()).err().unwrap().to_string();
    assert!(err.contains("chat template"), "{err}");
}

#[test]
fn tokenizer_round_trips_and_keeps_special_tokens() {
    let model = load("tiny-qwen2");
    let text = "<|im_start|>user\nhéllo 世界 🎉<|im_end|>";
    let ids = model.tokenizer.encode(text).unwrap();
    assert_eq!(ids[0], model.tokenizer.token_to_id("<|im_start|>").unwrap());
    assert_eq!(*ids.last().unwrap(), model.tokenizer.token_to_id("<|im_end|>").unwrap());
    assert_eq!(model.tokenizer.decode(&ids).unwrap(), text);
}
