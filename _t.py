import anyio, time
from pathlib import Path
from deepseekbench._plan._plan import BenchmarkPlan
from deepseekbench._net._gate import LiveGate
from deepseekbench._runner import run_plan
from deepseekbench._report._scorecard import Scorecard
C = 'engine_args = {target_step_ms = 2.0, verify_token_ms = 0.1, draft_step_ms = 0.15}'
p = BenchmarkPlan.from_toml(f'''
model = "deepseekbench-ref"
requests_per_cell = 5
warmup_per_cell = 0
repeats = 2
[arrival]
concurrency = [1, 4]
[parity]
max_tokens = 48
concurrency = 8
[[routes]]
label = "off"
speculative = "off"
dialect = "vllm"
launch = {{engine = "embedded", {C}}}
[[routes]]
label = "mtp"
speculative = "mtp"
dialect = "vllm"
launch = {{engine = "embedded", spec_tokens = [1, 2, 4], {C}}}
''')
t=time.time()
r = anyio.run(lambda: run_plan(p, gate=LiveGate(), results_path=Path("/tmp/launch.jsonl")))
print(time.time()-t)
for row in r.rows: print(row.route_label, row.concurrency, row.spec_tokens, row.route_identity, row.engine_version, row.spec_config, row.engine_command)
print(Scorecard.from_run(r).to_text()[:3000])
