[database]
{{ range service "primary.mysql" }}address = {{ .Address }}:{{ .Port }}{{ end }}
