-- wrk: POST the JSON-RPC body in $BODY with the headers the gateway needs.
wrk.method = "POST"
wrk.body = os.getenv("BODY")
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-key"
