"""Regenerates the shipped task files deterministically: `python -m marin_lab.evaluation.tasks.generate`."""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    r = random.Random(20261122)
    out = []
    for i in range(100):
        a, b = r.randint(10, 49), r.randint(10, 49)
        s = a + b
        wrong: set[int] = set()
        while len(wrong) < 3:
            w = s + r.choice([-10, -2, -1, 1, 2, 10, 11, -11])
            if w != s and w > 0: wrong.add(w)
        choices = [f" {s}"] + [f" {w}" for w in sorted(wrong)]
        r.shuffle(choices)
        out.append({"id": f"arith-{i:03d}", "context": f"Question: What is {a} plus {b}?\nAnswer:", "choices": choices, "label": choices.index(f" {s}")})
    open(HERE + "/arithmetic_2digit.jsonl", "w").write("".join(json.dumps(o) + "\n" for o in out))
    caps = [("France","Paris"),("Germany","Berlin"),("Spain","Madrid"),("Italy","Rome"),("Portugal","Lisbon"),("Japan","Tokyo"),("China","Beijing"),("India","New Delhi"),("Egypt","Cairo"),("Kenya","Nairobi"),("Canada","Ottawa"),("Mexico","Mexico City"),("Brazil","Brasilia"),("Argentina","Buenos Aires"),("Peru","Lima"),("Chile","Santiago"),("Russia","Moscow"),("Poland","Warsaw"),("Greece","Athens"),("Turkey","Ankara"),("Norway","Oslo"),("Sweden","Stockholm"),("Finland","Helsinki"),("Denmark","Copenhagen"),("Ireland","Dublin"),("Austria","Vienna"),("Hungary","Budapest"),("Australia","Canberra"),("Thailand","Bangkok"),("Vietnam","Hanoi"),("South Korea","Seoul"),("Indonesia","Jakarta"),("Iran","Tehran"),("Nigeria","Abuja"),("Morocco","Rabat"),("Cuba","Havana"),("Belgium","Brussels"),("Netherlands","Amsterdam"),("Switzerland","Bern"),("Czechia","Prague")]
    out = []
    for i, (c, cap) in enumerate(caps):
        others = r.sample([x for _, x in caps if x != cap], 3)
        choices = [f" {cap}"] + [f" {o}" for o in others]
        r.shuffle(choices)
        out.append({"id": f"capital-{i:03d}", "context": f"The capital of {c} is", "choices": choices, "label": choices.index(f" {cap}")})
    open(HERE + "/capitals.jsonl", "w").write("".join(json.dumps(o) + "\n" for o in out))


if __name__ == "__main__":
    main()
