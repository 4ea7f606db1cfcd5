import ctypes, re
def regions():
    out=[]; cur=None
    for line in open('/proc/self/smaps'):
        m=re.match(r'^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$', line)
        if m: cur=[int(m.group(1),16), int(m.group(2),16), m.group(3).strip(), 0]; out.append(cur)
        elif line.startswith('Rss:') and cur: cur[3]=int(line.split()[1])
    return out
def rss(): return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1])
r0=rss()
lib=ctypes.CDLL('libnvidia-ml.so.1')
r1=rss()
assert lib.nvmlInit_v2()==0
r2=rss()
rs=regions()
for i,(a,b,name,r) in enumerate(rs):
    if 'libnvidia-ml' in name and i+1<len(rs) and not rs[i+1][2]:
        print('after', name, 'anon', (rs[i+1][1]-rs[i+1][0])//1024, 'kB, rss', rs[i+1][3], 'kB')
print('libcuda mapped:', any('libcuda' in r[2] for r in rs))
print(f'RSS kB: python {r0}, +dlopen NVML {r1-r0}, +nvmlInit {r2-r1}')
lib.nvmlShutdown()
