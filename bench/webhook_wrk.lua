-- wrk script for the webhook: POST one AdmissionReview (BODY, default bench/data/gpu_pod_review_v1.json) to
-- /mutate on every request, over wrk's keep-alive connections (wrk is closed loop: each connection sends its
-- next request when the previous answer arrives). Non-2xx answers are counted by wrk ("Non-2xx or 3xx
-- responses"); a run with any is not a valid figure.
--   wrk -t 1 -c 1000 -d 10 --latency -s bench/webhook_wrk.lua https://127.0.0.1:PORT/mutate
local path = os.getenv("BODY") or "bench/data/gpu_pod_review_v1.json"
local f = assert(io.open(path, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
