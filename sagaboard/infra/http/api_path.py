"""Where the API lives: the one prefix the body limit, the JSON errors and the HTML 404 test."""

API_PREFIX = "/api/"
