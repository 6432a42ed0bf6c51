# Users and groups: names or numeric ids.
service "bad-user" {
  command = ["a"]
  user    = "post gres"   # ERROR: Invalid user
  group   = "-1"          # ERROR: Invalid group
  template {
    contents    = "x"
    destination = "x.conf"
    user        = ""      # ERROR: Invalid user
    group       = ["a"]   # ERROR: Incorrect attribute value type
  }
}

service "bad-types" {
  command = ["a"]
  user    = { name = "x" } # ERROR: Incorrect attribute value type
  group   = "a:b"          # ERROR: Invalid group
}
