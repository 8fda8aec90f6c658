import select, sys, time, os, statistics
from lmcache_resp import RespConnector
port=int(sys.argv[1]); n=int(sys.argv[2]); W=int(os.environ.get("W","8"))
c = RespConnector(host="127.0.0.1", port=port, num_workers=W)
fd = c.event_fd(); keys=[f"k{i}" for i in range(n)]
A=[];B=[];C=[];T=[]
for r in range(int(os.environ.get("R","4000"))):
    t0=time.perf_counter(); fid=c.submit_batch_exists(keys); t1=time.perf_counter()
    done=None
    while done is None:
        select.select([fd],[],[],10); t2=time.perf_counter()
        for comp in c.drain_completions():
            if comp[0]==fid: done=comp
    t3=time.perf_counter()
    if r>200: A.append(t1-t0);B.append(t2-t1);C.append(t3-t2);T.append(t3-t0)
m=lambda x: statistics.median(x)*1e6
print(f"W={W} n={n}: submit {m(A):.1f} us, wait {m(B):.1f} us, drain {m(C):.1f} us, total {m(T):.1f} us")
c.close()
