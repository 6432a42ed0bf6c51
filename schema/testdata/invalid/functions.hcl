service "f" {
  command = ["x", file("../structure.hcl")] # ERROR: Error in function call
  address = file("/etc/passwd")             # ERROR: Error in function call
  version = file("no-such-file")            # ERROR: Error in function call
  tags    = [jsondecode("{")]               # ERROR: Error in function call
  id      = format("%d", "x")               # ERROR: Error in function call
}
