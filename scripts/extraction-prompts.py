#!/usr/bin/env python3
"""Order confirmations to extract as JSON: the structured-output workload of an extraction
pipeline (a document of a few hundred tokens in the prompt, its fields copied into a fixed
schema), as against the shipped schemas' one-line prompts.

    scripts/extraction-prompts.py OUT_DIR [COUNT]

writes OUT_DIR/extract.jsonl (COUNT chat requests, 32 by default, the same every run) and
OUT_DIR/extract-schema/order.json (the one schema every request is sent with).
"""
import json
import pathlib
import random
import sys

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["order", "customer", "email", "ship_to", "items"],
    "properties": {
        "order": {"type": "string"},
        "customer": {"type": "string"},
        "email": {"type": "string"},
        "ship_to": {"type": "string"},
        "items": {
            "type": "array",
            "maxItems": 5,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "quantity", "unit_price"],
                "properties": {
                    "name": {"type": "string"},
                    "quantity": {"type": "integer"},
                    "unit_price": {"type": "number"},
                },
            },
        },
    },
}

FIRST = ["Ada", "Alan", "Grace", "Edsger", "Barbara", "Donald", "Margaret", "Ken", "Frances", "John", "Radia",
         "Tim", "Sophie", "Niklaus", "Hedy", "Dennis"]
LAST = ["Lovelace", "Turing", "Hopper", "Dijkstra", "Liskov", "Knuth", "Hamilton", "Thompson", "Allen", "Backus",
        "Perlman", "Berners-Lee", "Wilson", "Wirth", "Lamarr", "Ritchie"]
STREETS = ["Marsh Lane", "Hill Road", "Harbor Street", "Canal Row", "Elm Avenue", "Vine Street", "Station Road",
           "Mill Close", "Church Walk", "Park Terrace"]
TOWNS = ["Bristol", "Wilmslow", "Arlington", "Nuenen", "Cambridge", "Stanford", "Leeds", "Utrecht", "Lyon", "Graz",
         "Porto", "Bergen"]
GOODS = ["USB-C cable, 2 m", "Laptop stand", "Mechanical keyboard", "Noise-cancelling headphones", "Carry case",
         "Spare ear pads", "27-inch monitor", "HDMI cable", "Wireless mouse", "Mouse pad", "External SSD, 1 TB",
         "Webcam, 1080p", "Desk lamp", "Ergonomic chair", "Microphone arm", "Cable ties, pack of 50",
         "Docking station", "Portable charger", "Screen cleaning kit", "Graphics tablet"]
OPENERS = [
    "Thank you for shopping with us! We are happy to confirm that your order has been received and is being prepared.",
    "Good news: your order is confirmed. Our warehouse team will pack it within one working day.",
    "Hello, this message confirms the purchase below. Please keep it for your records.",
    "We have received your payment. Below is a summary of everything you ordered today.",
]
CLOSERS = [
    "If anything is wrong with this order, reply to this email within 14 days and we will sort it out.",
    "Delivery usually takes three to five working days. You will get a tracking link once the parcel ships.",
    "Questions? Our support team is available Monday to Friday, 9:00 to 17:00.",
    "Returns are free within 30 days. Keep the original packaging if you can.",
]


def prompts(count):
    rng = random.Random(7)
    for i in range(count):
        first, last = FIRST[i % len(FIRST)], LAST[(i * 5) % len(LAST)]
        domain = rng.choice(["org", "net", "com", "eu"])
        email = f"{first.lower()}.{last.lower().replace('-', '')}@example.{domain}"
        address = f"{rng.randint(1, 120)} {rng.choice(STREETS)}, {rng.choice(TOWNS)}"
        items = rng.sample(GOODS, rng.randint(2, 5))
        prices = [4.99, 9.5, 12.0, 19.99, 29.99, 49.0, 89.9, 149.0]
        lines = "\n".join(f"- {item}: {rng.randint(1, 4)} x {rng.choice(prices)} EUR" for item in items)
        text = (f"{rng.choice(OPENERS)}\n\nOrder confirmation ORD-{5100 + i * 7}\nCustomer: {first} {last}\n"
                f"Email: {email}\nShip to: {address}\nItems:\n{lines}\n\n{rng.choice(CLOSERS)}\n"
                "Kind regards, the shop team")
        yield ("Extract the order number, customer name, email, shipping address and every item's name, "
               f"quantity and unit price from this message as JSON:\n\n{text}")


def main():
    out = pathlib.Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    (out / "extract-schema").mkdir(parents=True, exist_ok=True)
    (out / "extract-schema" / "order.json").write_text(json.dumps(SCHEMA))
    with open(out / "extract.jsonl", "w") as f:
        for prompt in prompts(count):
            f.write(json.dumps({"messages": [{"role": "user", "content": prompt}]}) + "\n")


if __name__ == "__main__":
    main()
