"""Transformer blocks written the way Hugging Face modeling code writes them (transformers 4.x:
modeling_bert.py, modeling_gpt2.py, modeling_t5.py, modeling_llama.py), small: hidden 32, 4 heads,
2 layers, vocabulary 64. Batch and sequence are dynamic axes; the example is batch 2, sequence 7,
the second row padded (attention_mask 0) over its last 2 tokens, so the masks matter."""

import math

import torch
from torch import nn
import torch.nn.functional as F

from corpus import Case, Export

VOCAB, HIDDEN, HEADS, LAYERS, INTERMEDIATE, MAX_POS = 64, 32, 4, 2, 64, 32
BATCH, SEQ = 2, 7


def _ids(n=SEQ):
    return torch.randint(0, VOCAB, (BATCH, n), dtype=torch.long)


def _mask(n=SEQ):
    mask = torch.ones(BATCH, n, dtype=torch.long)
    mask[1, -2:] = 0
    return mask


def _gelu_new(x):
    # transformers.activations.NewGELUActivation (GPT-2's gelu_new)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


# ---- BERT ------------------------------------------------------------------------------------

class BertEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN, padding_idx=0)
        self.position_embeddings = nn.Embedding(MAX_POS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer('position_ids', torch.arange(MAX_POS).expand((1, -1)))

    def forward(self, input_ids, token_type_ids):
        seq_length = input_ids.size()[1]
        position_ids = self.position_ids[:, 0:seq_length]
        embeddings = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        embeddings = embeddings + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_attention_heads = HEADS
        self.attention_head_size = HIDDEN // HEADS
        self.all_head_size = HIDDEN
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)
        self.dropout = nn.Dropout(0.1)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        x = x.view(new_x_shape)
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        new_context_layer_shape = context_layer.size()[:-2] + (self.all_head_size,)
        return context_layer.view(new_context_layer_shape)


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = BertSelfAttention()
        self.attention_output = nn.Linear(HIDDEN, HIDDEN)
        self.attention_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate = nn.Linear(HIDDEN, INTERMEDIATE)
        self.output = nn.Linear(INTERMEDIATE, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, attention_mask):
        attention = self.self(hidden_states, attention_mask)
        attention = self.attention_norm(self.dropout(self.attention_output(attention)) + hidden_states)
        intermediate = F.gelu(self.intermediate(attention))  # hidden_act "gelu": erf
        return self.output_norm(self.dropout(self.output(intermediate)) + attention)


class BertModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = BertEmbeddings()
        self.layer = nn.ModuleList([BertLayer() for _ in range(LAYERS)])
        self.pooler = nn.Linear(HIDDEN, HIDDEN)

    def get_extended_attention_mask(self, attention_mask, dtype=torch.float32):
        extended_attention_mask = attention_mask[:, None, None, :]
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)
        return (1.0 - extended_attention_mask) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask, token_type_ids):
        extended_attention_mask = self.get_extended_attention_mask(attention_mask)
        hidden_states = self.embeddings(input_ids, token_type_ids)
        for layer in self.layer:
            hidden_states = layer(hidden_states, extended_attention_mask)
        pooled_output = torch.tanh(self.pooler(hidden_states[:, 0]))
        return hidden_states, pooled_output


def _bert():
    token_type_ids = torch.zeros(BATCH, SEQ, dtype=torch.long)
    token_type_ids[:, 4:] = 1
    dyn = {0: 'batch', 1: 'sequence'}
    return Export(BertModel(), (_ids(), _mask(), token_type_ids), ['input_ids', 'attention_mask', 'token_type_ids'],
                  ['last_hidden_state', 'pooler_output'],
                  dynamic_axes={'input_ids': dyn, 'attention_mask': dyn, 'token_type_ids': dyn,
                                'last_hidden_state': dyn, 'pooler_output': {0: 'batch'}})


# ---- GPT-2 -----------------------------------------------------------------------------------

class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a Linear with the weight transposed, via addmm."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02 * 10)  # wider than GPT-2's init, so the layers matter

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        x = x.view(size_out)
        return x


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        max_positions = MAX_POS
        self.register_buffer(
            'bias',
            torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)).view(
                1, 1, max_positions, max_positions),
            persistent=False)
        self.register_buffer('masked_bias', torch.tensor(-1e4), persistent=False)
        self.embed_dim = HIDDEN
        self.num_heads = HEADS
        self.head_dim = HIDDEN // HEADS
        self.split_size = HIDDEN
        self.c_attn = Conv1D(3 * HIDDEN, HIDDEN)
        self.c_proj = Conv1D(HIDDEN, HIDDEN)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def _attn(self, query, key, value, attention_mask=None):
        attn_weights = torch.matmul(query, key.transpose(-1, -2))
        attn_weights = attn_weights / torch.full(
            [], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device)
        query_length, key_length = query.size(-2), key.size(-2)
        causal_mask = self.bias[:, :, key_length - query_length: key_length, :key_length]
        mask_value = torch.finfo(attn_weights.dtype).min
        mask_value = torch.full([], mask_value, dtype=attn_weights.dtype).to(attn_weights.device)
        attn_weights = torch.where(causal_mask, attn_weights.to(attn_weights.dtype), mask_value)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_weights = attn_weights.type(value.dtype)
        attn_weights = self.attn_dropout(attn_weights)
        return torch.matmul(attn_weights, value)

    def _split_heads(self, tensor, num_heads, attn_head_size):
        new_shape = tensor.size()[:-1] + (num_heads, attn_head_size)
        tensor = tensor.view(new_shape)
        return tensor.permute(0, 2, 1, 3)

    def _merge_heads(self, tensor, num_heads, attn_head_size):
        tensor = tensor.permute(0, 2, 1, 3).contiguous()
        new_shape = tensor.size()[:-2] + (num_heads * attn_head_size,)
        return tensor.view(new_shape)

    def forward(self, hidden_states, attention_mask):
        query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)
        query = self._split_heads(query, self.num_heads, self.head_dim)
        key = self._split_heads(key, self.num_heads, self.head_dim)
        value = self._split_heads(value, self.num_heads, self.head_dim)
        present = (key, value)
        attn_output = self._attn(query, key, value, attention_mask)
        attn_output = self._merge_heads(attn_output, self.num_heads, self.head_dim)
        attn_output = self.resid_dropout(self.c_proj(attn_output))
        return attn_output, present


class GPT2MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = Conv1D(INTERMEDIATE, HIDDEN)
        self.c_proj = Conv1D(HIDDEN, INTERMEDIATE)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states):
        return self.dropout(self.c_proj(_gelu_new(self.c_fc(hidden_states))))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.mlp = GPT2MLP()

    def forward(self, hidden_states, attention_mask):
        residual = hidden_states
        attn_output, present = self.attn(self.ln_1(hidden_states), attention_mask)
        hidden_states = attn_output + residual
        residual = hidden_states
        hidden_states = residual + self.mlp(self.ln_2(hidden_states))
        return hidden_states, present


class GPT2LMHeadModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(MAX_POS, HIDDEN)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(HIDDEN, eps=1e-5)

    def forward(self, input_ids, attention_mask):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        batch_size = input_ids.shape[0]
        past_length = 0
        position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long)
        position_ids = position_ids.unsqueeze(0).view(-1, input_shape[-1])
        attention_mask = attention_mask.view(batch_size, -1)
        attention_mask = attention_mask[:, None, None, :]
        attention_mask = attention_mask.to(dtype=torch.float32)
        attention_mask = (1.0 - attention_mask) * torch.finfo(torch.float32).min
        hidden_states = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        presents = ()
        for block in self.h:
            hidden_states, present = block(hidden_states, attention_mask)
            presents = presents + (torch.stack(present),)
        hidden_states = self.ln_f(hidden_states)
        lm_logits = torch.matmul(hidden_states, self.wte.weight.t())  # lm_head tied to wte
        return (lm_logits,) + presents


def _gpt2():
    dyn = {0: 'batch', 1: 'sequence'}
    present = {1: 'batch', 3: 'sequence'}
    return Export(GPT2LMHeadModel(), (_ids(), _mask()), ['input_ids', 'attention_mask'],
                  ['logits', 'present.0', 'present.1'],
                  dynamic_axes={'input_ids': dyn, 'attention_mask': dyn, 'logits': dyn,
                                'present.0': present, 'present.1': present})


# ---- T5 --------------------------------------------------------------------------------------

class T5LayerNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN) + 0.1 * torch.randn(HIDDEN))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


class T5Attention(nn.Module):
    def __init__(self, is_decoder, has_relative_attention_bias):
        super().__init__()
        self.is_decoder = is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = 8
        self.relative_attention_max_distance = 20
        self.d_model = HIDDEN
        self.key_value_proj_dim = HIDDEN // HEADS
        self.n_heads = HEADS
        self.inner_dim = HIDDEN
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position
        relative_position_bucket = self._relative_position_bucket(
            relative_position, bidirectional=(not self.is_decoder),
            num_buckets=self.relative_attention_num_buckets, max_distance=self.relative_attention_max_distance)
        values = self.relative_attention_bias(relative_position_bucket)
        values = values.permute([2, 0, 1]).unsqueeze(0)
        return values

    def forward(self, hidden_states, mask=None, key_value_states=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]
        real_seq_length = seq_length
        key_length = real_seq_length if key_value_states is None else key_value_states.shape[1]

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        def unshape(states):
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

        query_states = shape(self.q(hidden_states))
        source = hidden_states if key_value_states is None else key_value_states
        key_states = shape(self.k(source))
        value_states = shape(self.v(source))
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros((1, self.n_heads, real_seq_length, key_length), dtype=scores.dtype)
            else:
                position_bias = self.compute_bias(real_seq_length, key_length)
            if mask is not None:
                position_bias = position_bias + mask
        scores += position_bias
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = unshape(torch.matmul(attn_weights, value_states))
        return self.o(attn_output), position_bias


class T5Block(nn.Module):
    def __init__(self, is_decoder, has_relative_attention_bias):
        super().__init__()
        self.is_decoder = is_decoder
        self.self_attention = T5Attention(is_decoder, has_relative_attention_bias)
        self.self_norm = T5LayerNorm()
        if is_decoder:
            self.cross_attention = T5Attention(is_decoder, False)
            self.cross_norm = T5LayerNorm()
        # T5 v1.1 DenseGatedActDense, gelu_new
        self.wi_0 = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.wi_1 = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.wo = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.ff_norm = T5LayerNorm()

    def forward(self, hidden_states, attention_mask, position_bias, encoder_hidden_states=None,
                encoder_attention_mask=None, encoder_decoder_position_bias=None):
        attn, position_bias = self.self_attention(self.self_norm(hidden_states), attention_mask,
                                                  position_bias=position_bias)
        hidden_states = hidden_states + attn
        if self.is_decoder:
            attn, encoder_decoder_position_bias = self.cross_attention(
                self.cross_norm(hidden_states), encoder_attention_mask, key_value_states=encoder_hidden_states,
                position_bias=encoder_decoder_position_bias)
            hidden_states = hidden_states + attn
        forwarded = self.ff_norm(hidden_states)
        forwarded = self.wo(_gelu_new(self.wi_0(forwarded)) * self.wi_1(forwarded))
        return hidden_states + forwarded, position_bias, encoder_decoder_position_bias


class T5ForConditionalGeneration(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Embedding(VOCAB, HIDDEN)
        self.encoder = nn.ModuleList([T5Block(False, i == 0) for i in range(LAYERS)])
        self.encoder_final = T5LayerNorm()
        self.decoder = nn.ModuleList([T5Block(True, i == 0) for i in range(LAYERS)])
        self.decoder_final = T5LayerNorm()
        self.model_dim = HIDDEN

    @staticmethod
    def invert_attention_mask(encoder_attention_mask):
        encoder_extended_attention_mask = encoder_attention_mask[:, None, None, :]
        encoder_extended_attention_mask = encoder_extended_attention_mask.to(dtype=torch.float32)
        return (1.0 - encoder_extended_attention_mask) * torch.finfo(torch.float32).min

    @staticmethod
    def decoder_extended_attention_mask(attention_mask, input_shape):
        # ModuleUtilsMixin.create_extended_attention_mask_for_decoder
        batch_size, seq_length = input_shape
        seq_ids = torch.arange(seq_length)
        causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
        causal_mask = causal_mask.to(attention_mask.dtype)
        extended_attention_mask = causal_mask[:, None, :, :] * attention_mask[:, None, None, :]
        extended_attention_mask = extended_attention_mask.to(dtype=torch.float32)
        return (1.0 - extended_attention_mask) * torch.finfo(torch.float32).min

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        hidden_states = self.shared(input_ids)
        mask = self.invert_attention_mask(attention_mask)
        position_bias = None
        for block in self.encoder:
            hidden_states, position_bias, _ = block(hidden_states, mask, position_bias)
        encoder_hidden_states = self.encoder_final(hidden_states)

        decoder_attention_mask = torch.ones_like(decoder_input_ids)
        decoder_mask = self.decoder_extended_attention_mask(decoder_attention_mask, decoder_input_ids.size())
        hidden_states = self.shared(decoder_input_ids)
        position_bias, cross_bias = None, None
        for block in self.decoder:
            hidden_states, position_bias, cross_bias = block(hidden_states, decoder_mask, position_bias,
                                                             encoder_hidden_states, mask, cross_bias)
        sequence_output = self.decoder_final(hidden_states)
        sequence_output = sequence_output * (self.model_dim ** -0.5)
        lm_logits = torch.matmul(sequence_output, self.shared.weight.t())
        return lm_logits, encoder_hidden_states


def _t5():
    model = T5ForConditionalGeneration()
    decoder_input_ids = torch.randint(0, VOCAB, (BATCH, 5), dtype=torch.long)
    return Export(model, (_ids(), _mask(), decoder_input_ids), ['input_ids', 'attention_mask', 'decoder_input_ids'],
                  ['logits', 'encoder_last_hidden_state'],
                  dynamic_axes={'input_ids': {0: 'batch', 1: 'encoder_sequence'},
                                'attention_mask': {0: 'batch', 1: 'encoder_sequence'},
                                'decoder_input_ids': {0: 'batch', 1: 'decoder_sequence'},
                                'logits': {0: 'batch', 1: 'decoder_sequence'},
                                'encoder_last_hidden_state': {0: 'batch', 1: 'encoder_sequence'}})


# ---- LLaMA -----------------------------------------------------------------------------------

class LlamaRMSNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN) + 0.1 * torch.randn(HIDDEN))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, max_position_embeddings=MAX_POS, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer('inv_freq', inv_freq, persistent=False)
        t = torch.arange(max_position_embeddings, dtype=self.inv_freq.dtype)
        freqs = torch.einsum('i,j->ij', t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer('cos_cached', emb.cos(), persistent=False)
        self.register_buffer('sin_cached', emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        return self.cos_cached[:seq_len].to(dtype=x.dtype), self.sin_cached[:seq_len].to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    cos = cos[position_ids].unsqueeze(1)
    sin = sin[position_ids].unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_heads = HEADS
        self.head_dim = HIDDEN // HEADS
        self.num_key_value_heads = 2  # grouped-query attention
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.q_proj = nn.Linear(HIDDEN, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(HIDDEN, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(HIDDEN, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, HIDDEN, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim)

    def forward(self, hidden_states, attention_mask, position_ids):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        kv_seq_len = key_states.shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin, position_ids)
        key_states = repeat_kv(key_states, self.num_key_value_groups)
        value_states = repeat_kv(value_states, self.num_key_value_groups)
        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        attn_output = attn_output.reshape(bsz, q_len, HIDDEN)
        return self.o_proj(attn_output)


class LlamaMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = LlamaAttention()
        self.mlp = LlamaMLP()
        self.input_layernorm = LlamaRMSNorm()
        self.post_attention_layernorm = LlamaRMSNorm()

    def forward(self, hidden_states, attention_mask, position_ids):
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), attention_mask, position_ids)
        hidden_states = residual + hidden_states
        residual = hidden_states
        return residual + self.mlp(self.post_attention_layernorm(hidden_states))


class LlamaForCausalLM(nn.Module):
    """mask_style 'triu': a bool upper triangle from torch.triu (Falcon/Mistral-style
    _make_causal_mask; LLaMA >= 4.38 calls torch.triu too) — torch exports triu from opset 14 only.
    mask_style 'arange': transformers 4.31's LlamaModel._make_causal_mask (masked_fill over an
    arange comparison), which exports at every opset."""

    def __init__(self, mask_style):
        super().__init__()
        self.mask_style = mask_style
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(LAYERS)])
        self.norm = LlamaRMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def _causal_mask(self, tgt_len, dtype):
        if self.mask_style == 'triu':
            upper = torch.triu(torch.ones((tgt_len, tgt_len), dtype=torch.bool), diagonal=1)
            mask = torch.zeros((tgt_len, tgt_len), dtype=dtype).masked_fill(upper, torch.finfo(dtype).min)
        else:
            mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
            mask_cond = torch.arange(mask.size(-1))
            mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
            mask = mask.to(dtype)
        return mask[None, None, :, :]

    def _prepare_decoder_attention_mask(self, attention_mask, input_shape, dtype):
        bsz, tgt_len = input_shape
        causal = self._causal_mask(tgt_len, dtype).expand(bsz, 1, tgt_len, tgt_len)
        # _expand_mask
        expanded_mask = attention_mask[:, None, None, :].expand(bsz, 1, tgt_len, tgt_len).to(dtype)
        inverted_mask = 1.0 - expanded_mask
        inverted_mask = inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)
        return inverted_mask + causal

    def forward(self, input_ids, attention_mask, position_ids):
        inputs_embeds = self.embed_tokens(input_ids)
        mask = self._prepare_decoder_attention_mask(attention_mask, input_ids.shape, inputs_embeds.dtype)
        hidden_states = inputs_embeds
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, position_ids)
        return self.lm_head(self.norm(hidden_states))


def _llama(mask_style):
    def build():
        position_ids = torch.arange(SEQ, dtype=torch.long).unsqueeze(0).expand(BATCH, SEQ).contiguous()
        dyn = {0: 'batch', 1: 'sequence'}
        return Export(LlamaForCausalLM(mask_style), (_ids(), _mask(), position_ids),
                      ['input_ids', 'attention_mask', 'position_ids'], ['logits'],
                      dynamic_axes={'input_ids': dyn, 'attention_mask': dyn, 'position_ids': dyn, 'logits': dyn})
    return build


def cases():
    desc = f'batch {BATCH} x sequence {SEQ} token ids, dynamic batch and sequence'
    return [
        Case('hf_bert', 'transformer-block', _bert, desc, slice=True,
             notes='BertModel: embeddings, 2 layers (view/permute attention, finfo.min extended mask, erf GELU), pooler'),
        Case('hf_gpt2', 'transformer-block', _gpt2, desc, slice=True,
             notes='GPT2LMHeadModel: Conv1D (addmm), tril bool causal buffer + torch.where, gelu_new, presents'),
        Case('hf_t5', 'transformer-block', _t5, desc + ' (decoder sequence 5)', slice=True,
             notes='T5ForConditionalGeneration: relative position buckets (log, where, min), T5LayerNorm, gated gelu_new, decoder causal mask, cross attention'),
        Case('hf_llama', 'transformer-block', _llama('triu'), desc, slice=True,
             notes='LlamaForCausalLM: RMSNorm (pow/mean/rsqrt), rotate_half RoPE with position_ids, GQA repeat_kv, SiLU-gated MLP, torch.triu bool causal mask'),
        Case('hf_llama_arange_mask', 'transformer-block', _llama('arange'), desc, slice=True,
             notes='as hf_llama, with transformers 4.31\'s _make_causal_mask (masked_fill of an arange comparison)'),
    ]
