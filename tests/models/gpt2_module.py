"""GPT-2 as Hugging Face's transformers writes it (GPT2LMHeadModel, no KV cache), in plain torch.

transformers is not a Debian package, so this restates its modeling_gpt2.py: the same module
tree and parameter names ("transformer.h.0.attn.c_attn.weight"), Conv1D as addmm with weights
stored [in, out], the causal mask as torch.where(tril buffer, scores, finfo.min), the
tanh-approximated GELU ("gelu_new") written out, and the LM head tied to the token embedding.
What torch.onnx.export makes of it is what it makes of Hugging Face's model: the same ops on
the same shapes.
"""

import math

import torch
from torch import nn


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer whose weight is stored transposed, [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class NewGELUActivation(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, hidden, heads, positions):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((positions, positions),
                                                           dtype=torch.bool))
                             .view(1, 1, positions, positions))
        self.embed_dim = hidden
        self.num_heads = heads
        self.head_dim = hidden // heads
        self.split_size = hidden
        self.c_attn = Conv1D(3 * hidden, hidden)
        self.c_proj = Conv1D(hidden, hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _attn(self, query, key, value):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full([], value.size(-1) ** 0.5,
                                                 dtype=attn_weights.dtype,
                                                 device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length:key_length, :key_length].to(
            torch.bool)
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights, mask_value)
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor):
        tensor = tensor.view(tensor.size()[:-1] + (self.num_heads, self.head_dim))
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        return tensor.view(tensor.size()[:-2] + (self.num_heads * self.head_dim,))

    def forward(self, hidden_states):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        attn_output = self._attn(self._split_heads(query), self._split_heads(key),
                                 self._split_heads(value))
        attn_output = self.c_proj(self._merge_heads(attn_output))
        return self.resid_dropout(attn_output)


class GPT2MLP(nn.Module):
    def __init__(self, inner, hidden):
        super().__init__()
        self.c_fc = Conv1D(inner, hidden)
        self.c_proj = Conv1D(hidden, inner)
        self.act = NewGELUActivation()
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, hidden, heads, positions, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = GPT2Attention(hidden, heads, positions)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = GPT2MLP(4 * hidden, hidden)

    def forward(self, hidden_states):
        residual = hidden_states
        hidden_states = residual + self.attn(self.ln_1(hidden_states))
        residual = hidden_states
        return residual + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    def __init__(self, vocab, positions, hidden, layers, heads, eps):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(positions, hidden)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GPT2Block(hidden, heads, positions, eps) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)

    def forward(self, input_ids):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        position_ids = torch.arange(0, input_shape[-1], dtype=torch.long,
                                    device=input_ids.device)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        for block in self.h:
            hidden_states = block(hidden_states)
        hidden_states = self.ln_f(hidden_states)
        return hidden_states.view(input_shape + (hidden_states.size(-1),))


class GPT2LMHeadModel(nn.Module):
    """GPT-2 small by default (124.4 M parameters)."""

    def __init__(self, vocab=50257, positions=1024, hidden=768, layers=12, heads=12, eps=1e-5):
        super().__init__()
        self.transformer = GPT2Model(vocab, positions, hidden, layers, heads, eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tie_weights()

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))
