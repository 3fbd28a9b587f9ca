#!/usr/bin/env python3
# Summarises the CT_EXP_TRACE lines (experiments.patch) of a tuner bench log: per kernel (k1 the
# all-reduce one-shot, k2 the fused one-shot, k3 the add + RMSNorm kernel) and size, the median
# cycles between the stamps of thread 0 of block 0 (T1 after griddepcontrol.wait, T2 call state
# read, T3 pushes issued, T4 re-arm issued, T6 its own packs received, T7 the rows' barrier
# passed, T8 output stored, T9 the end), and the ns from the last traced kernel's end to T1.
#   trace_summary.py call1/trace/t-0.log
import sys,re,statistics as st
from collections import defaultdict
for f in sys.argv[1:]:
    d=defaultdict(list)
    for line in open(f):
        if not line.startswith('TR '): continue
        t=line.split()
        kind=t[1]; b=int(t[4][1:]); gap=int(t[8]); 
        ci=t.index('C'); gi=t.index('G')
        c=[int(x) for x in t[ci+1:ci+10]]
        g=[int(x) for x in t[gi+1:gi+10]]
        prev=t[6]
        d[(kind,b,prev)].append((gap,c,g))
    print('==',f)
    names=['T1','T2','T3','T4','T5','T6','T7','T8','T9']
    for k in sorted(d):
        rows=d[k]
        # segments in cycles between consecutive present points
        segs=defaultdict(list); gaps=[]
        for gap,c,g in rows:
            pts=[(0,0)]+[(i+1,v) for i,v in enumerate(c) if v>=0]
            for (i0,v0),(i1,v1) in zip(pts,pts[1:]):
                segs[(i0,i1)].append(v1-v0)
            # gap from previous end to T1 in ns
            gaps.append(gap+g[0])
        s=' '.join(f"T{a}-T{b}:{int(st.median(v))}" for (a,b),v in sorted(segs.items()))
        tot=[c[8]-c[0] for gap,c,g in rows if c[8]>=0 and c[0]>=0]
        print(f"{k[0]} b{k[1]} {k[2]} n={len(rows)} prevend->T1 ns med {int(st.median(gaps))} | {s} | T1-T9 {int(st.median(tot)) if tot else -1}")
