-- wrk script: POST a chat completion. BENCH_KEY (Authorization) and BENCH_STREAM=1 come from the environment.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local key = os.getenv("BENCH_KEY")
if key and key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. key
end
if os.getenv("BENCH_STREAM") == "1" then
  wrk.body = '{"model":"bench-model","messages":[{"role":"user","content":"hi"}],"stream":true}'
else
  wrk.body = '{"model":"bench-model","messages":[{"role":"user","content":"hi"}]}'
end
