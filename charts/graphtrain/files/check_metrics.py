# `helm test`: the operator answers on /metrics through its Service (python3 -c this URL).
import sys
import time
import urllib.request

url = sys.argv[1]
for _attempt in range(30):  # the operator may still be starting: a minute at most
    try:
        body = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError as exc:
        print(f"{url}: {exc}", flush=True)
        time.sleep(2)
        continue
    if "graphtrain_operator_leader" in body:
        print(f"{url}: the operator answers")
        sys.exit(0)
    sys.exit(f"{url} answers without graphtrain_operator_leader")
sys.exit(f"{url} did not answer in 30 attempts")
