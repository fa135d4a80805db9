"""Seed inputs for config_fuzzer: config.json texts of every family of layouts/ that resolve against the
fuzzer's synthetic checkpoint (2 experts of 3 x 4, shared experts of 3 rows, dense FFNs of 6, layers 0 and
1), plus a layout file, written into the corpus folder given as the only argument."""
import json
import os
import sys

corpus = sys.argv[1]
os.makedirs(corpus, exist_ok=True)
here = os.path.dirname(os.path.abspath(__file__))


def write(name, value):
    with open(os.path.join(corpus, name), 'w') as f:
        f.write(json.dumps(value, indent=1))


common = {'num_hidden_layers': 2, 'hidden_size': 4, 'num_experts_per_tok': 2, 'hidden_act': 'silu'}
write('mixtral.json', dict(common, model_type='mixtral', num_local_experts=2, intermediate_size=3))
write('olmoe.json', dict(common, model_type='olmoe', num_experts=2, intermediate_size=3, norm_topk_prob=False))
write('qwen2_moe.json', dict(common, model_type='qwen2_moe', num_experts=2, moe_intermediate_size=3,
                             shared_expert_intermediate_size=3, decoder_sparse_step=1, mlp_only_layers=[1],
                             norm_topk_prob=True))
write('deepseek_v3.json', dict(common, model_type='deepseek_v3', n_routed_experts=2, moe_intermediate_size=3,
                               n_shared_experts=1, first_k_dense_replace=1, moe_layer_freq=1, scoring_func='sigmoid',
                               topk_method='noaux_tc', n_group=1, topk_group=1, routed_scaling_factor=2.5,
                               norm_topk_prob=True))
write('deepseek_v2.json', dict(common, model_type='deepseek_v2', n_routed_experts=2, moe_intermediate_size=3,
                               n_shared_experts=1, topk_method='group_limited_greedy', n_group=2, topk_group=1))
write('switch.json', {'model_type': 'switch_transformers', 'num_layers': 2, 'num_decoder_layers': 2,
                      'num_experts': 2, 'd_model': 4, 'd_ff': 3, 'encoder_sparse_step': 2, 'decoder_sparse_step': 2,
                      'dense_act_fn': 'relu'})
write('llama.json', {'model_type': 'llama', 'num_hidden_layers': 2, 'hidden_size': 4, 'intermediate_size': 6,
                     'hidden_act': 'silu'})
write('unknown.json', {'model_type': 'jamba', 'num_hidden_layers': 1})
with open(os.path.join(here, '..', 'layouts', 'qwen2_moe.json')) as f:
    layout = f.read()
with open(os.path.join(corpus, 'layout-qwen2_moe.json'), 'w') as f:
    f.write(layout)
