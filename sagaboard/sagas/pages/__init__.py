"""What operators read: thin views."""
