"""The agent's machinery below the lesson: each concern in a module of its own."""
