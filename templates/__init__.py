"""jinja2 templates, shipped inside the package as `lxcfix.templates`."""
