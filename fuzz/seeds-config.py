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
# A layer report as one process sends it to another (compress::layer_report_json): the same bytes go to
# compress::parse_layer_report.
write('layer-report.json', {
    'layer': 'model.layers.0.block_sparse_moe', 'experts': 8, 'distinct_experts': 4, 'groups': [0, 1, 0, 2, 3, 1, 2, 3],
    'dominants': [0, 1, 3, 4], 'coefficients': [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
    'group_merge_errors': [0.1, 'nan', 0.2, 0.3], 'router_rule': 'map', 'id_map': [0, 1, 0, 2, 3, 1, 2, 3],
    'frequencies': [], 'similarity_tokens': 0, 'augmented_tokens': 0, 'criterion': 'reap', 'scores': [1.5, '-inf'],
    'kept': [0, 3], 'keep': 0.25, 'values': 'bf16', 'formats': [['bitmap', '-', 'csr16']], 'residual_bytes': [214],
    'barycenter_iterations': 3, 'barycenter_status': 1, 'barycenter_objective': 1.97,
    'resmoe_approximation_error': 0.69, 'center': 'barycenter', 'residual': 'prune', 'rank': 0,
    'output_relative_error': 0.78, 'calibration_tokens': 64, 'bytes_before': 6080.0, 'bytes_after': 7280.0,
    'bytes_written': 7280.0, 'bits_per_weight': 40.4, 'steps_seconds': [['loading', 0.01], ['merging', 'inf']],
    'stored_experts': 4, 'expert_map_tensor': 'model.layers.0.block_sparse_moe.expert_map', 'seconds': 0.5})
