"""Seed inputs for index_fuzzer: model.safetensors.index.json texts as Hugging Face's save_pretrained writes
them (metadata with total_size, a weight_map over several shards), compact and indented, plus shard names in
sub-directories, written into the corpus folder given as the only argument."""
import json
import os
import sys

corpus = sys.argv[1]
os.makedirs(corpus, exist_ok=True)


def write(name, value, indent=2):
    with open(os.path.join(corpus, name), 'w') as f:
        f.write(json.dumps(value, indent=indent))


weight_map = {f'model.layers.{l}.mlp.experts.{e}.w{k}.weight': f'model-0000{1 + l}-of-00002.safetensors'
              for l in range(2) for e in range(2) for k in (1, 2, 3)}
write('hf.json', {'metadata': {'total_size': 123456}, 'weight_map': weight_map})
write('compact.json', {'weight_map': {'w': 'model.safetensors'}}, indent=None)
write('subdir.json', {'metadata': {}, 'weight_map': {'a': 'shards/one.safetensors', 'b': './two.safetensors'}})
write('unicode.json', {'weight_map': {'poids.\u00e9': 'mod\u00e8le.safetensors'}}, indent=None)
write('extra.json', {'weight_map': {'x': 'a.safetensors'}, 'format': 'pt', 'n': [1, 2.5, None, True]})
