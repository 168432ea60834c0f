from experiments.cli import capacity

if __name__ == "__main__":
    capacity()
