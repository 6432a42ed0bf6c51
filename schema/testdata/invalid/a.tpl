hello {{ key "x" }}
