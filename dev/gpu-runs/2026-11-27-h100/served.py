"""Which FAST cases the promoted package serves with an evolved kernel (issue 36's acceptance)."""
import json, sys
from pathlib import Path
from evo.api import fast_shapes
table = json.loads(Path(sys.argv[1]).read_text())
routes = table["routes"]
print("routes:", len(routes), "all closed:", all(isinstance(r["max_len"], int) for r in routes))
for r in routes:
    print(f"  D={r['head_dim']} {r['dtype']} {'causal' if r['causal'] else 'full'} L {r['min_len']}..{r['max_len']} "
          f"B*H<={r['max_bh']} -> {r['candidate'][:12] if r['candidate'] else 'SDPA'}")
for dtype in ("fp16", "bf16"):
    for s in fast_shapes(None, dtype):
        hit = next((r for r in routes if (r["head_dim"], r["dtype"], r["causal"]) == (s.D, dtype, s.causal)
                    and r["min_len"] <= s.L <= r["max_len"]), None)
        served = hit is not None and hit["kernel"] is not None and s.B * s.H <= hit["max_bh"]
        print(f"{s.tag:12s} {dtype} B*H={s.B*s.H:4d} L={s.L:5d}: {'kernel ' + hit['candidate'][:12] if served else 'SDPA'}")
