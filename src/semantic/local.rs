//! A BERT-family sentence-embedding model (e.g. all-MiniLM-L6-v2) run in-process with candle:
//! `config.json`, `tokenizer.json` and `model.safetensors` from one directory; tokenised without
//! padding, truncated at the model's maximum positions; mean pooling over the tokens; unit
//! length. A small encoder of our own over candle-nn rather than the whole transformers crate:
//! the build is minutes shorter on 2 cores.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct BertConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    type_vocab_size: usize,
    layer_norm_eps: f64,
    #[serde(default)]
    hidden_act: Option<String>,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

pub struct LocalModel {
    tokenizer: tokenizers::Tokenizer,
    words: Embedding,
    positions: Embedding,
    types: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    max_positions: usize,
}

fn err(what: &str) -> impl Fn(candle_core::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl LocalModel {
    /// Loads the model from `dir`; every problem is a message naming the file.
    pub fn load(dir: &Path) -> Result<LocalModel, String> {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .map_err(|e| format!("{}: {e}", dir.join(name).display()))
        };
        let cfg: BertConfig =
            serde_json::from_str(&read("config.json")?).map_err(|e| format!("config.json: {e}"))?;
        if cfg
            .hidden_act
            .as_deref()
            .is_some_and(|a| a != "gelu" && a != "gelu_new")
        {
            return Err(format!(
                "config.json: unsupported hidden_act {:?}",
                cfg.hidden_act
            ));
        }
        if !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
            return Err("config.json: hidden_size is not a multiple of the heads".into());
        }
        let mut tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| format!("tokenizer.json: {e}"))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length: cfg.max_position_embeddings,
                ..Default::default()
            }))
            .map_err(|e| format!("tokenizer.json: {e}"))?;
        let device = Device::Cpu;
        let tensors = candle_core::safetensors::load(dir.join("model.safetensors"), &device)
            .map_err(err("model.safetensors"))?;
        // Weights are stored with or without a `bert.` prefix.
        let prefixed = tensors.keys().any(|k| k.starts_with("bert."));
        let root = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let vb = if prefixed { root.pp("bert") } else { root };
        let h = cfg.hidden_size;
        let e = vb.pp("embeddings");
        let weights = err("model.safetensors");
        let words =
            candle_nn::embedding(cfg.vocab_size, h, e.pp("word_embeddings")).map_err(&weights)?;
        let positions =
            candle_nn::embedding(cfg.max_position_embeddings, h, e.pp("position_embeddings"))
                .map_err(&weights)?;
        let types = candle_nn::embedding(cfg.type_vocab_size, h, e.pp("token_type_embeddings"))
            .map_err(&weights)?;
        let norm =
            candle_nn::layer_norm(h, cfg.layer_norm_eps, e.pp("LayerNorm")).map_err(&weights)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let a = l.pp("attention");
            layers.push(Layer {
                query: candle_nn::linear(h, h, a.pp("self.query")).map_err(&weights)?,
                key: candle_nn::linear(h, h, a.pp("self.key")).map_err(&weights)?,
                value: candle_nn::linear(h, h, a.pp("self.value")).map_err(&weights)?,
                attn_out: candle_nn::linear(h, h, a.pp("output.dense")).map_err(&weights)?,
                attn_norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, a.pp("output.LayerNorm"))
                    .map_err(&weights)?,
                intermediate: candle_nn::linear(
                    h,
                    cfg.intermediate_size,
                    l.pp("intermediate.dense"),
                )
                .map_err(&weights)?,
                output: candle_nn::linear(cfg.intermediate_size, h, l.pp("output.dense"))
                    .map_err(&weights)?,
                out_norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, l.pp("output.LayerNorm"))
                    .map_err(&weights)?,
            });
        }
        Ok(LocalModel {
            tokenizer,
            words,
            positions,
            types,
            norm,
            layers,
            heads: cfg.num_attention_heads,
            max_positions: cfg.max_position_embeddings,
        })
    }

    /// The token ids the model sees for `text` (special tokens included, truncated).
    pub fn tokens(&self, text: &str) -> Result<Vec<u32>, String> {
        let enc = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| format!("tokenising: {e}"))?;
        let mut ids = enc.get_ids().to_vec();
        ids.truncate(self.max_positions);
        Ok(ids)
    }

    /// The sentence embedding: mean of the last layer over every token, unit length.
    /// Blocking (CPU work): call it off the async runtime.
    pub fn embed(&self, text: &str) -> Result<Vec<f32>, String> {
        let ids = self.tokens(text)?;
        self.forward(&ids).map_err(|e| format!("forward pass: {e}"))
    }

    fn forward(&self, ids: &[u32]) -> candle_core::Result<Vec<f32>> {
        let n = ids.len();
        let device = Device::Cpu;
        let ids = Tensor::from_slice(ids, (1, n), &device)?;
        let pos = Tensor::arange(0u32, n as u32, &device)?.unsqueeze(0)?;
        let typ = Tensor::zeros((1, n), DType::U32, &device)?;
        let x = (self.words.forward(&ids)? + self.positions.forward(&pos)?)?;
        let mut x = self.norm.forward(&(x + self.types.forward(&typ)?)?)?;
        let h = x.dim(2)?;
        let d = h / self.heads;
        let scale = 1.0 / (d as f64).sqrt();
        let split = |t: Tensor| -> candle_core::Result<Tensor> {
            t.reshape((1, n, self.heads, d))?
                .transpose(1, 2)?
                .contiguous()
        };
        for l in &self.layers {
            let q = split(l.query.forward(&x)?)?;
            let k = split(l.key.forward(&x)?)?;
            let v = split(l.value.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let ctx = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((1, n, h))?;
            let a = l.attn_norm.forward(&(l.attn_out.forward(&ctx)? + &x)?)?;
            let i = l.intermediate.forward(&a)?.gelu_erf()?;
            x = l.out_norm.forward(&(l.output.forward(&i)? + &a)?)?;
        }
        let pooled = x.mean(1)?.squeeze(0)?;
        let norm = pooled.sqr()?.sum_all()?.sqrt()?;
        pooled.broadcast_div(&norm)?.to_vec1::<f32>()
    }
}
