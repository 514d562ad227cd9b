-- wrk script: POST a chat completion. From the environment: BENCH_KEY (Authorization), BENCH_STREAM=1
-- (ask for a stream), BENCH_MODEL (default bench-model).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
local model = os.getenv("BENCH_MODEL") or "bench-model"
if os.getenv("BENCH_STREAM") == "1" then
  wrk.body = string.format('{"model":"%s","messages":[{"role":"user","content":"hi"}],"stream":true}', model)
else
  wrk.body = string.format('{"model":"%s","messages":[{"role":"user","content":"hi"}]}', model)
end
