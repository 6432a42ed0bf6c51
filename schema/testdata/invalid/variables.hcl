variable "needed" {}           # ERROR: Missing variable value

variable "port" {
  type    = number
  default = "eighty"           # ERROR: Invalid default value
}

variable "port" {              # ERROR: Duplicate variable
  default = 1
}

variable "ref" {
  default = var.needed         # ERROR: Variables not allowed
}

variable "bad type" {          # ERROR: Invalid variable name
  default = 1
}

variable "typed" {
  type    = strng              # ERROR: Invalid type specification
  default = 1
}

service "v" {
  command = ["x", var.prot]    # ERROR: Undeclared variable
  port    = var.needed
  address = nosuch.thing       # ERROR: Unknown variable
  version = uper("x")          # ERROR: Call to unknown function
}
