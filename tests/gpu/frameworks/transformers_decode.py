#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""A Llama-architecture model from transformers (random weights from a
fixed seed: nothing is downloaded) decoding greedily token after token
with its KV cache; each step prints the token and its logit.

    transformers_decode.py [--steps N] [--sleep S]"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import steps  # noqa: E402
import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

args = steps.options()
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
cfg = LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=4096)
model = LlamaForCausalLM(cfg).to("cuda").eval()
tokens = torch.randint(0, 4096, (1, 16), device="cuda")
with torch.no_grad():
    out = model(tokens, use_cache=True)
    past = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    for i in range(args.steps):
        out = model(nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logit, nxt = out.logits[:, -1].max(-1)
        nxt = nxt.unsqueeze(-1)
        steps.step(i, int(nxt), float(logit), sleep=args.sleep)
steps.params(sum(float(p.double().sum()) for p in model.parameters()))
